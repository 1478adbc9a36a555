package sandbox

import "context"

// Cleaner is the optional interface of a runtime whose sandboxes can
// outlive a pinfold killed with SIGKILL (cgroups, containers, pods):
// Clean removes what runs of pinfolds that no longer exist left behind,
// never what a live one uses, and describes each thing it removed ("a
// path", "podman container NAME"). pinfold clean calls every runtime's.
type Cleaner interface {
	Clean(ctx context.Context) ([]string, error)
}
