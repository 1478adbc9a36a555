// Package disk gives a run a filesystem of a fixed size, so that what the
// run writes (its changeset and its /tmp) cannot grow past a cap: an ext4
// image in pinfold's store, its space allocated up front so that the host's
// disk cannot fill under it, loop-mounted by the supervisor.
//
// A Volume is mounted on the host only while the sandbox is being built;
// Detach then takes it off the host's mount table, so a supervisor killed
// with SIGKILL leaves no mount behind: the kernel frees the filesystem (and
// its loop device) with the last process that holds it.
package disk

import (
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by errors about hosts or users that cannot
// have a volume (no loop devices, not root).
var ErrUnsupported = errors.New("a disk cap needs root and loop devices")

// MinSize is the smallest volume.
const MinSize = 16 << 20

// Full is how little free space counts as full: a writer that failed with
// "no space left on device" leaves less than one write's worth.
const Full = 1 << 20

func sizeError(size int64) error {
	return fmt.Errorf("disk cap %d bytes is below the minimum of %d", size, int64(MinSize))
}
