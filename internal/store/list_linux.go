package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/oci"

	"golang.org/x/sys/unix"
)

// ErrInUse: a running sandbox uses the base.
var ErrInUse = errors.New("in use by a running sandbox")

// BaseInfo describes a base in the store.
type BaseInfo struct {
	Kind    string // tar, oci or a curated name (debian-12)
	ID      string // sha256:<hex>
	Source  string // the archive, image or mirror it came from
	Created string
	Dir     string // bases/<kind>/<hex>
}

// baseKinds are the directories of bases/.
func (s *Store) baseKinds() []string {
	kinds := []string{"tar", "oci"}
	return append(kinds, CuratedNames[:]...)
}

// Bases lists the bases in the store, newest first.
func (s *Store) Bases() ([]BaseInfo, error) {
	var out []BaseInfo
	for _, kind := range s.baseKinds() {
		entries, err := os.ReadDir(s.dir + "/bases/" + kind)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			if !isHex(e.Name()) {
				continue
			}
			dir := s.dir + "/bases/" + kind + "/" + e.Name()
			b, err := os.ReadFile(dir + "/manifest.json")
			if err != nil {
				continue // an entry being removed
			}
			var m struct {
				Source, Mirror, Created string
			}
			json.Unmarshal(b, &m)
			src := m.Source
			if src == "" {
				src = m.Mirror
			}
			out = append(out, BaseInfo{Kind: kind, ID: digestPrefix + e.Name(), Source: src, Created: m.Created, Dir: dir})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created > out[j].Created })
	return out, nil
}

// FindBase returns the base whose id (with or without "sha256:") starts
// with prefix.
func (s *Store) FindBase(prefix string) (BaseInfo, error) {
	prefix = strings.TrimPrefix(prefix, digestPrefix)
	if len(prefix) < 4 || !isHex(prefix) {
		return BaseInfo{}, fmt.Errorf("base id %q: give at least 4 hex digits of an id from pinfold base ls", prefix)
	}
	all, err := s.Bases()
	if err != nil {
		return BaseInfo{}, err
	}
	var found []BaseInfo
	for _, b := range all {
		if strings.HasPrefix(strings.TrimPrefix(b.ID, digestPrefix), prefix) {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 0:
		return BaseInfo{}, fmt.Errorf("no base %s in the store (pinfold base ls lists them)", prefix)
	case 1:
		return found[0], nil
	}
	return BaseInfo{}, fmt.Errorf("base id %s is ambiguous: %d bases start with it", prefix, len(found))
}

// UseBase marks the base whose root is root as in use until the returned
// function is called: RemoveBase and the garbage collector leave it alone.
// The mark is a shared lock, so it goes away with the process.
func UseBase(root string) (release func()) {
	fd, err := unix.Open(strings.TrimSuffix(root, "/rootfs")+"/manifest.json", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	if unix.Flock(fd, unix.LOCK_SH) != nil {
		unix.Close(fd)
		return func() {}
	}
	return func() { unix.Close(fd) }
}

// RemoveBase deletes a base unless a running sandbox uses it. Curated
// indexes that point at it are removed too.
func (s *Store) RemoveBase(b BaseInfo) error {
	fd, err := unix.Open(b.Dir+"/manifest.json", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("removing base %s: %w", b.ID, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("removing base %s: %w", b.ID, ErrInUse)
	}
	if err := os.MkdirAll(s.dir+"/tmp", 0o700); err != nil {
		return err
	}
	gone, err := s.workName()
	if err != nil {
		return err
	}
	// Out of bases/ at once; the files go after.
	if err := os.Rename(b.Dir, gone); err != nil {
		return fmt.Errorf("removing base %s: %w", b.ID, err)
	}
	if idx := s.dir + "/index/curated/" + b.Kind; b.Kind != "tar" && b.Kind != "oci" {
		if cur, err := os.ReadFile(idx); err == nil && strings.TrimSpace(string(cur)) == b.ID {
			os.Remove(idx)
		}
	}
	if b.Kind == "tar" {
		s.dropIndex(b.ID)
	}
	return removeTree(gone)
}

// dropIndex removes the tar index entries that point at digest.
func (s *Store) dropIndex(digest string) {
	entries, _ := os.ReadDir(s.dir + "/index/tar")
	for _, e := range entries {
		p := s.dir + "/index/tar/" + e.Name()
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == digest {
			os.Remove(p)
		}
	}
}

// GC removes what nothing references: derived images whose base is gone or
// that another format version wrote, bases no image is built on (except the
// newest build of each curated base), and the work directories of imports
// that died. Bases and images a running sandbox uses stay. With dryRun it
// only reports. Changesets are not the store's to collect.
func (s *Store) GC(dryRun bool) (removed []string, err error) {
	bases, err := s.Bases()
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, b := range bases {
		have[b.ID] = true
	}
	keep := map[string]bool{}
	entries, _ := os.ReadDir(s.dir + "/images")
	for _, e := range entries {
		dir := s.dir + "/images/" + e.Name()
		m, err := s.Image(digestPrefix + e.Name())
		if err == nil && have[m.Base] {
			keep[m.Base] = true
			continue
		}
		if inUse(dir + "/manifest.json") {
			continue
		}
		removed = append(removed, "image "+digestPrefix+e.Name())
		if !dryRun {
			if err := s.removeDir(dir); err != nil {
				return removed, err
			}
		}
	}
	for _, name := range CuratedNames {
		if b, err := s.CuratedBase(name); err == nil {
			keep[b.Digest] = true
		}
	}
	for _, b := range bases {
		if keep[b.ID] {
			continue
		}
		if dryRun {
			if !inUse(b.Dir + "/manifest.json") {
				removed = append(removed, b.Kind+" base "+b.ID)
			}
			continue
		}
		if err := s.RemoveBase(b); err != nil {
			if errors.Is(err, ErrInUse) {
				continue
			}
			return removed, err
		}
		removed = append(removed, b.Kind+" base "+b.ID)
	}
	// The records of checked app files are a cache of checks (CheckOnce):
	// without them a run checks its file again.
	if recs, _ := os.ReadDir(s.dir + "/index/checked"); len(recs) > 0 {
		removed = append(removed, fmt.Sprintf("%d records of checked app files", len(recs)))
		if !dryRun {
			for _, r := range recs {
				os.Remove(s.dir + "/index/checked/" + r.Name())
			}
		}
	}
	if !dryRun {
		gone, err := s.CleanTmp()
		for _, g := range gone {
			removed = append(removed, "work dir "+g)
		}
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// inUse reports whether a sandbox holds its shared lock on a manifest.
func inUse(manifest string) bool {
	fd, err := unix.Open(manifest, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	unix.Flock(fd, unix.LOCK_UN)
	return false
}

// removeDir moves dir out of the way at once, then deletes it.
func (s *Store) removeDir(dir string) error {
	if err := os.MkdirAll(s.dir+"/tmp", 0o700); err != nil {
		return err
	}
	gone, err := s.workName()
	if err != nil {
		return err
	}
	if err := os.Rename(dir, gone); err != nil {
		return err
	}
	return removeTree(gone)
}

// BaseID returns the id a tar or OCI base will have, without importing
// it: a tar archive's digest (from the index, or by hashing the file), an
// image's config digest; for a registry reference only once pulled
// ("" before).
func (s *Store) BaseID(ctx context.Context, kind, path, ref string) (string, error) {
	switch kind {
	case "tar":
		abs, err := absPath(path)
		if err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Stat(abs, &st); err != nil {
			return "", &fs.PathError{Op: "stat", Path: abs, Err: err}
		}
		if b, ok := s.lookup(indexKey(&st, abs, ImportOptions{}.limits(s.asRoot))); ok {
			return b.Digest, nil
		}
		f, err := os.Open(abs)
		if err != nil {
			return "", err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		return digestPrefix + hex.EncodeToString(h.Sum(nil)), nil
	case "oci":
		if path == "" {
			img, err := oci.Open(ctx, s.dir+"/oci", pullKey(ref))
			if err != nil {
				return "", nil
			}
			return img.ConfigDigest, nil
		}
		img, err := oci.Open(ctx, path, ref)
		if err != nil {
			return "", err
		}
		return img.ConfigDigest, nil
	}
	return "", fmt.Errorf("no id for %s bases", kind)
}

// lock takes an exclusive lock named name in the store, waiting for
// another pinfold process that holds it (the same base or image being
// built); it is released by the returned function or when the process ends.
func (s *Store) lock(ctx context.Context, name string) (func(), error) {
	if err := os.MkdirAll(s.dir+"/locks", 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Open(s.dir+"/locks/"+name, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if err != unix.EWOULDBLOCK {
			unix.Close(fd)
			return nil, err
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
