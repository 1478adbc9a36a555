package store

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/oci"
)

// OCI bases:
//
//	bases/oci/<hex>/rootfs/         the image's layers applied in order
//	bases/oci/<hex>/manifest.json   {"id","source","ref","format","layers":[...],"created","format_version","uid_shift"}
//
// <hex> is the digest of the image's config, which names the image's
// content whatever the file it came in (an OCI layout, docker save,
// podman save). Opening the file reads its index and manifest only; the
// layers are read, and checked against their digests, on the first use.

type ociManifest struct {
	ID       string   `json:"id"`
	Source   string   `json:"source"`
	Ref      string   `json:"ref,omitempty"`
	Format   string   `json:"source_format"`
	Layers   []string `json:"layers"`
	Created  string   `json:"created"`
	Version  int      `json:"format"`
	UIDShift *uint32  `json:"uid_shift,omitempty"`
}

// HasOCIBase reports whether the image whose config has configDigest is
// unpacked in the store as opt would unpack it (one small read): OCIBase
// would then return it without unpacking.
func (s *Store) HasOCIBase(configDigest string, opt ImportOptions) bool {
	hexSum, ok := strings.CutPrefix(configDigest, digestPrefix)
	return ok && isHex(hexSum) && checkBase(s.dir+"/bases/oci/"+hexSum, opt.limits(s.asRoot)) == nil
}

// OCIBase returns the root filesystem of the image ref in the OCI layout,
// docker-archive or oci-archive at path, unpacking it into the store the
// first time.
func (s *Store) OCIBase(ctx context.Context, path, ref string, opt ImportOptions) (_ Base, err error) {
	abs, err := absPath(path)
	if err != nil {
		return Base{}, fmt.Errorf("oci base: %w", err)
	}
	img, err := oci.Open(ctx, abs, ref)
	if err != nil {
		return Base{}, fmt.Errorf("oci base: %w", err)
	}
	hexSum, ok := strings.CutPrefix(img.ConfigDigest, digestPrefix)
	if !ok || !isHex(hexSum) {
		return Base{}, fmt.Errorf("oci base %s: unsupported config digest %q", abs, img.ConfigDigest)
	}
	lim := opt.limits(s.asRoot)
	final := s.dir + "/bases/oci/" + hexSum
	if checkBase(final, lim) == nil {
		return Base{Digest: img.ConfigDigest, Root: final + "/rootfs"}, nil
	}
	s.imports.Add(1)
	for _, d := range [...]string{"tmp", "bases/oci"} {
		if err := os.MkdirAll(s.dir+"/"+d, 0o700); err != nil {
			return Base{}, fmt.Errorf("importing %s: %w", abs, err)
		}
	}
	work, err := s.newWorkDir()
	if err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	keep := false
	defer func() {
		if !keep {
			removeTree(work)
		}
	}()
	root := work + "/rootfs"
	if err := os.Mkdir(root, 0o700); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	ao := oci.ApplyOptions{Chown: lim.chown, MaxBytes: lim.maxBytes, MaxEntries: int64(lim.maxEntries)}
	if lim.chown {
		ao.UIDShift = lim.shift
	}
	if _, err := oci.Apply(ctx, img, root, ao); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	m := ociManifest{ID: img.ConfigDigest, Source: abs, Ref: ref, Format: img.Format,
		Created: time.Now().UTC().Format(time.RFC3339), Version: manifestFormat}
	for _, l := range img.Layers {
		d := l.Digest
		if d == "" { // a compressed layer of a docker-archive: named by its content
			d = l.DiffID
		}
		m.Layers = append(m.Layers, d)
	}
	if lim.chown {
		m.UIDShift = &lim.shift
	}
	if err := writeJSON(work+"/manifest.json", &m, 0o600); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	if err := syncDir(work); err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	won, err := commitDir(work, final)
	if err != nil {
		return Base{}, fmt.Errorf("importing %s: %w", abs, err)
	}
	keep = won
	if !won {
		if err := checkBase(final, lim); err != nil {
			return Base{}, fmt.Errorf("importing %s: %w", abs, err)
		}
	}
	return Base{Digest: img.ConfigDigest, Root: final + "/rootfs"}, nil
}
