// Package oci reads container images from local files and unpacks their
// layers into a directory, so that an image can serve as a sandbox base.
//
// [Open] reads three forms, told apart by what they hold:
//
//   - "oci-layout": a directory with an oci-layout file, index.json and
//     blobs/<alg>/<hex> (skopeo copy ... oci:DIR, umoci, buildah push oci:);
//   - "oci-archive": a tar of such a directory (podman save --format
//     oci-archive, skopeo copy ... oci-archive:FILE);
//   - "docker-archive": a tar with a manifest.json listing images by config
//     file, RepoTags and layer files (docker save, podman save --format
//     docker-archive, skopeo copy ... docker-archive:FILE).
//
// Archives are read in place, not unpacked: Open indexes the tar once and
// reads entries at their offsets, so an archive must be a plain tar (not a
// compressed one) on a file that can seek.
//
// Nothing read is trusted. Every JSON document is size-capped, every blob
// named by a digest is checked against it, and every layer is checked
// against the diff id its config lists, both when the stream ends (see
// [Layer.Open]). [Apply] treats every layer as hostile (see there).
//
// Identity: ManifestDigest is the digest of the image manifest chosen (for
// a multi-platform index, the one for this machine's platform, not the
// index). A docker-archive has no manifest blob, so its ManifestDigest is
// the config digest, which is the image ID docker and podman show; it
// names the image's content, since the config lists the digest of every
// layer's content. The config digest is the same for an image in any of the
// three forms as long as the tools that converted it kept the config's
// bytes, as skopeo does.
package oci

import (
	"errors"
	"io"
	"strconv"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// Image is an image read from a local source: its layers in order (bottom
// first) and its config.
type Image struct {
	Source string // what was opened, made absolute
	// Format is "oci-layout", "docker-archive" or "oci-archive".
	Format string
	// ManifestDigest is "<alg>:<hex>" of the manifest chosen; for a
	// docker-archive, the config digest (see the package doc).
	ManifestDigest string
	ConfigDigest   string // "<alg>:<hex>" of the config blob
	Config         ImageConfig
	Layers         []Layer
}

// ImageConfig is the part of an image config that says how to run it.
type ImageConfig struct {
	Env        []string `json:"Env"`
	Entrypoint []string `json:"Entrypoint"`
	Cmd        []string `json:"Cmd"`
	WorkingDir string   `json:"WorkingDir"`
	User       string   `json:"User"`
}

// Layer is one layer of an image. Its zero value cannot be opened.
type Layer struct {
	// Digest is the digest of the blob as stored, compressed or not. A
	// docker-archive does not name its layer blobs by digest: there it is
	// the diff id for an uncompressed layer (every tool writes those) and
	// empty for a compressed one.
	Digest string
	// DiffID is the digest of the uncompressed tar, from the config's
	// rootfs.diff_ids.
	DiffID    string
	MediaType string
	Size      int64 // of the blob as stored
	open      func() (io.ReadCloser, error)
}

// ApplyOptions tune [Apply]. The zero value is ready to use.
type ApplyOptions struct {
	// UIDShift is added to every owner and group id when Chown is set, so
	// that files show their image ids inside a user namespace that maps 0
	// to UIDShift.
	UIDShift uint32
	// Chown gives files the owners the layers list (plus UIDShift), which
	// needs root (CAP_CHOWN). Without it every file belongs to the caller.
	Chown bool
	// KeepSUID keeps setuid and setgid bits. It needs Chown and a non-zero
	// UIDShift, so that no file becomes setuid to a host user outside the
	// image's own id range; without KeepSUID the bits are dropped.
	KeepSUID bool
	// MaxBytes caps the file data and symlink targets written over all
	// layers, overwritten files included (0 means 16 GiB).
	MaxBytes int64
	// MaxEntries caps the entries read over all layers, directories made
	// for unlisted parents included (0 means 1,000,000).
	MaxEntries int64
}

// ApplyStats tells what [Apply] did.
type ApplyStats struct {
	Layers    int   // layers applied
	Entries   int64 // tar entries read, whiteouts and skipped ones included
	Bytes     int64 // bytes of file data and symlink targets written
	Whiteouts int64 // whiteout and opaque-directory entries applied
	Removed   int64 // files and directories removed by whiteouts, or replaced by a later layer
	Devices   int64 // device nodes and fifos left out
}

const (
	defaultMaxBytes   = 16 << 30
	defaultMaxEntries = 1_000_000
)

// Errors that callers may branch on with errors.Is.
var (
	// ErrUnsafeLayer: a layer entry would escape the root, go through a
	// symlink, or is otherwise refused.
	ErrUnsafeLayer = errors.New("unsafe layer")
	// ErrLimit: the layers expand beyond ApplyOptions.MaxBytes or have more
	// than ApplyOptions.MaxEntries entries.
	ErrLimit = errors.New("image limit exceeded")
	// ErrDigest: a blob or a layer's content does not match its digest.
	ErrDigest = errors.New("digest mismatch")
	// ErrNoDecompressor: a layer needs the zstd command, which is not
	// installed.
	ErrNoDecompressor = errors.New("decompressor not installed")
)

// EntryError is a layer entry that could not be unpacked or was refused.
type EntryError struct {
	Layer  int    // 1 for the bottom layer
	Digest string // the layer's digest, or its diff id if it has none
	Entry  string // the entry's name as written in the layer
	Err    error
}

func (e *EntryError) Error() string {
	return "layer " + strconv.Itoa(e.Layer) + " (" + e.Digest + "): entry " + tarentry.Quote(e.Entry) + ": " + e.Err.Error()
}

func (e *EntryError) Unwrap() error { return e.Err }

// reason is an error with a fixed text that belongs to one of the classes
// above. The class is a number, not an error, so that reasons declared as
// package variables are laid out by the compiler and cost nothing at init.
type reason struct {
	msg   string
	class errClass
}

type errClass uint8

const (
	unsafeLayer errClass = iota
	limitExceeded
	unsupported
)

func (r *reason) Error() string { return r.msg }

func (r *reason) Unwrap() error {
	switch r.class {
	case limitExceeded:
		return ErrLimit
	case unsupported:
		return errors.ErrUnsupported
	}
	return ErrUnsafeLayer
}
