package container

import (
	"context"
	"os/exec"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/sandbox"
)

// Leftovers lists this engine's containers (and docker's volumes, as
// "volume NAME") that pinfold made and whose pinfold process is gone
// (killed before it could remove them), and the idmapped mounts such
// processes left (as "mounts DIR", whichever engine they were for).
func (r *Runtime) Leftovers(ctx context.Context) ([]string, error) {
	left, err := r.containers(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range deadMounts() {
		left = append(left, "mounts "+d)
	}
	if r.engine == DockerName && r.Check(ctx, nil) == nil {
		for _, v := range r.volumes(ctx) {
			left = append(left, "volume "+v)
		}
	}
	return left, nil
}

// containers lists the containers of Leftovers.
func (r *Runtime) containers(ctx context.Context) ([]string, error) {
	if r.Check(ctx, nil) != nil {
		return nil, nil // no engine, nothing of ours in it
	}
	// podman's Labels is a map, docker's a string with a Label method.
	label := `{{.Label "` + Label + `"}}`
	if r.engine == PodmanName {
		label = `{{index .Labels "` + Label + `"}}`
	}
	out, err := exec.CommandContext(ctx, r.bin, "ps", "-a", "--filter", "label="+Label, "--format", "{{.Names}} "+label).Output()
	if err != nil {
		return nil, &engineError{engine: r.engine, detail: "listing containers: " + err.Error()}
	}
	var left []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, owner, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || ownerAlive(owner) {
			continue
		}
		left = append(left, name)
	}
	return left, nil
}

// volumes lists the unused volumes pinfold made (docker's overlays of
// changesets) whose pinfold process is gone.
func (r *Runtime) volumes(ctx context.Context) []string {
	out, err := exec.CommandContext(ctx, r.bin, "volume", "ls", "--filter", "label="+Label, "--filter", "dangling=true",
		"--format", "{{.Name}} {{.Label \""+Label+"\"}}").Output()
	if err != nil {
		return nil
	}
	var left []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, owner, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && !ownerAlive(owner) {
			left = append(left, name)
		}
	}
	return left
}

var _ sandbox.Cleaner = (*Runtime)(nil)

// Clean removes the containers Leftovers lists, and their volumes, and
// returns what it removed ("podman container NAME"); it detaches the
// idmapped mounts of killed runs first (see CleanMounts).
func (r *Runtime) Clean(ctx context.Context) ([]string, error) {
	if _, err := CleanMounts(); err != nil {
		return nil, err
	}
	left, err := r.containers(ctx)
	if err != nil {
		return nil, err
	}
	if r.engine == DockerName && r.Check(ctx, nil) == nil {
		defer func() {
			if vs := r.volumes(ctx); len(vs) > 0 {
				exec.CommandContext(ctx, r.bin, append([]string{"volume", "rm", "-f"}, vs...)...).Run()
			}
		}()
	}
	if len(left) == 0 {
		return nil, nil
	}
	out, err := exec.CommandContext(ctx, r.bin, append([]string{"rm", "-f", "-v"}, left...)...).CombinedOutput()
	if err != nil {
		return nil, &engineError{engine: r.engine, detail: "removing " + strings.Join(left, ", ") + ": " + firstLine(string(out))}
	}
	removed := make([]string, len(left))
	for i, n := range left {
		removed[i] = r.engine + " container " + n
	}
	return removed, nil
}

// ownerAlive reports whether the pinfold process a label names runs.
func ownerAlive(owner string) bool {
	pid, start, ok := strings.Cut(owner, "-")
	if !ok {
		return false
	}
	p, err := strconv.Atoi(pid)
	if err != nil {
		return false
	}
	st := startTime(p)
	return st != 0 && strconv.FormatUint(st, 10) == start
}
