package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/disk"
	"github.com/pinfold/pinfold/internal/fault"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/internal/units"
	"github.com/pinfold/pinfold/sandbox"
)

// A run with --disk writes its changeset and /tmp into a volume of that
// size, <changeset>/disk.img, mounted at <changeset>/disk while the
// sandbox is built:
//
//	disk/r<N>/upper, disk/r<N>/work   the overlay of root N
//	disk/tmp                          the sandbox's /tmp
//
// Once the command ends, the upper directories are copied back to where
// the rest of pinfold reads a changeset (<changeset>/r<N>/upper) and the
// volume goes. A marker in <store>/disks names every changeset with a
// volume, so that the next pinfold finds one a killed run left behind.

func disksDir(store string) string { return filepath.Join(store, "disks") }

// openDisk creates the volume of a run on cs and points the sandbox at it.
// On a rerun (--changeset) the changeset's writes so far are copied in.
func (e *Engine) openDisk(ctx context.Context, cs *changeset.Changeset, p *plan.Plan, sp *sandbox.Spec) (*disk.Volume, error) {
	store := e.Store
	if err := os.MkdirAll(disksDir(store), 0o700); err != nil {
		return nil, fault.New(fault.Store, "cannot record the disk of changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	marker := filepath.Join(disksDir(store), cs.Meta.ID)
	// The marker holds the cap, for the summary of a run that handed
	// off (finishDisk).
	if err := os.WriteFile(marker, []byte(strconv.FormatInt(p.Disk, 10)), 0o600); err != nil {
		return nil, fault.New(fault.Store, "cannot record the disk of changeset "+cs.Meta.ID, err.Error(), "", err)
	}
	v, err := disk.Create(ctx, filepath.Join(cs.Dir, "disk.img"), filepath.Join(cs.Dir, "disk"), p.Disk)
	if err != nil {
		os.Remove(marker)
		hint := "free space in pinfold's store, or ask for a smaller --disk"
		if errors.Is(err, disk.ErrUnsupported) {
			hint = "run pinfold as root, or run without --disk (limits.disk: none)"
		}
		return nil, fault.New(fault.DiskCap, "cannot make the "+units.FormatSize(p.Disk)+" disk of this run", err.Error(), hint, err)
	}
	fail := func(err error) (*disk.Volume, error) {
		v.Close()
		os.Remove(marker)
		return nil, fault.New(fault.DiskCap, "cannot prepare the disk of this run", err.Error(), "", err)
	}
	roots := cs.Roots()
	for i, r := range roots {
		rel := "r" + strconv.Itoa(i)
		for _, sub := range []string{rel, rel + "/upper", rel + "/work"} {
			if err := os.Mkdir(filepath.Join(v.Dir(), sub), 0o700); err != nil {
				return fail(err)
			}
		}
		if fi, err := os.Stat(r.Lower); err == nil {
			os.Chmod(filepath.Join(v.Dir(), rel, "upper"), changeset.UpperMode(fi.Mode()))
		}
		if p.Changeset != "" {
			if err := v.CopyIn(ctx, r.Upper, rel+"/upper"); err != nil {
				return fail(err)
			}
		}
		// Root 0 is the workspace's when it has a changeset, as in
		// startChangeset; the captures follow in order.
		c := sp.Changeset
		if j := i - len(roots) + len(sp.Captures); j >= 0 {
			c = &sp.Captures[j]
		}
		c.Upper, c.Work = filepath.Join(v.Dir(), rel, "upper"), filepath.Join(v.Dir(), rel, "work")
	}
	tmp := filepath.Join(v.Dir(), "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fail(err)
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return fail(err)
	}
	sp.Scratch = tmp
	return v, nil
}

// dropDisk removes the volume of a run that did not start.
func (e *Engine) dropDisk(cs *changeset.Changeset, v *disk.Volume) {
	v.Close()
	os.Remove(filepath.Join(disksDir(e.Store), cs.Meta.ID))
}

// closeDisk copies the run's writes out of v into cs and removes v. It
// reports whether the run filled the volume.
func (e *Engine) closeDisk(ctx context.Context, cs *changeset.Changeset, v *disk.Volume) (full bool, err error) {
	full = v.IsFull()
	for i, r := range cs.Roots() {
		if err = copyBack(ctx, v, "r"+strconv.Itoa(i)+"/upper", r.Upper); err != nil {
			break
		}
	}
	if cerr := v.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return full, fault.New(fault.Store, "cannot keep the writes of changeset "+cs.Meta.ID, err.Error(),
			"free space in pinfold's store; the writes stay in "+v.Image+" until then", err)
	}
	os.Remove(filepath.Join(disksDir(e.Store), cs.Meta.ID))
	return full, nil
}

// copyBack replaces the upper directory dst with rel of v: into a new
// directory first, so that a failed copy leaves dst as it was.
func copyBack(ctx context.Context, v *disk.Volume, rel, dst string) error {
	next, old := dst+".next", dst+".old"
	os.RemoveAll(next)
	if err := os.Mkdir(next, 0o700); err != nil {
		return err
	}
	if err := v.CopyOut(ctx, rel, next); err != nil {
		os.RemoveAll(next)
		return err
	}
	os.RemoveAll(old)
	if err := os.Rename(dst, old); err != nil {
		return err
	}
	if err := os.Rename(next, dst); err != nil {
		os.Rename(old, dst)
		return err
	}
	return os.RemoveAll(old)
}

// finishDisk keeps the writes of cs's volume when its run handed off to
// the waiter, which could not: the volume went with the sandbox's mounts,
// and its image is mounted again to copy them back. It returns whether
// the run filled its disk, and the cap (0: the run had no disk). The
// caller holds cs's lock.
func (e *Engine) finishDisk(ctx context.Context, cs *changeset.Changeset) (full bool, capBytes int64, err error) {
	marker := filepath.Join(disksDir(e.Store), cs.Meta.ID)
	b, err := os.ReadFile(marker)
	if err != nil {
		return false, 0, nil
	}
	capBytes, _ = strconv.ParseInt(string(b), 10, 64)
	image, dir := filepath.Join(cs.Dir, "disk.img"), filepath.Join(cs.Dir, "disk")
	var v *disk.Volume
	switch {
	case disk.Mounted(dir):
		v = disk.Attached(image, dir)
	default:
		if _, err := os.Stat(image); err != nil {
			os.Remove(marker)
			return false, capBytes, nil
		}
		if v, err = disk.Mount(image, dir); err != nil {
			return false, capBytes, fault.New(fault.DiskCap, "cannot keep the writes of changeset "+cs.Meta.ID, err.Error(),
				"run any pinfold command to recover them, or discard the changeset (pinfold discard "+cs.Meta.ID+")", err)
		}
	}
	full, err = e.closeDisk(ctx, cs, v)
	return full, capBytes, err
}

// recoverDisks takes over the volumes of runs a killed pinfold left: their
// writes so far join the changeset (which lists as interrupted), and the
// volume goes.
func (e *Engine) recoverDisks(ctx context.Context) error {
	store := e.Store
	ents, err := os.ReadDir(disksDir(store))
	if err != nil || len(ents) == 0 {
		return nil
	}
	for _, ent := range ents {
		marker := filepath.Join(disksDir(store), ent.Name())
		cs, err := changeset.Open(store, ent.Name())
		if err != nil {
			os.Remove(marker)
			continue
		}
		unlock, err := cs.Lock()
		if err != nil {
			continue // its run is still going
		}
		image, dir := filepath.Join(cs.Dir, "disk.img"), filepath.Join(cs.Dir, "disk")
		var v *disk.Volume
		switch {
		case disk.Mounted(dir):
			v = disk.Attached(image, dir)
		default:
			if _, err := os.Stat(image); err != nil {
				os.Remove(dir)
				os.Remove(marker)
				unlock()
				continue
			}
			if v, err = disk.Mount(image, dir); err != nil {
				unlock()
				return fault.New(fault.DiskCap, "cannot recover the disk of changeset "+cs.Meta.ID, err.Error(),
					"discard the changeset (pinfold discard "+cs.Meta.ID+")", err)
			}
		}
		_, err = e.closeDisk(ctx, cs, v)
		unlock()
		if err != nil {
			return err
		}
		e.notice("kept the writes of changeset %s from its disk (its run was interrupted)", cs.Meta.ID)
	}
	return nil
}
