package pack

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Archive is what pinfold reads of an image archive it packed (an app
// file or pack image's FILE.tar) without unpacking it: its metadata, its
// signature, and the manifest and config of its one image. Reading
// checks the manifest and config against their digests; the layers are
// checked when a run unpacks them (internal/oci).
type Archive struct {
	Path string
	// Meta is nil for an archive that is not an app.
	Meta *AppMeta
	// Signature is nil for an unsigned archive.
	Signature *Signature
	// Digest is the manifest digest index.json names.
	Digest   string
	Manifest Manifest
	Config   ImageConfig
	// Docker is docker's manifest.json, when the archive has one.
	Docker []DockerManifest
}

// Manifest is the part of an OCI image manifest pinfold reads.
type Manifest struct {
	MediaType string       `json:"mediaType"`
	Config    Descriptor   `json:"config"`
	Layers    []Descriptor `json:"layers"`
}

// Descriptor names a blob.
type Descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// ImageConfig is the part of an image config pinfold reads.
type ImageConfig struct {
	Created string `json:"created"`
	Config  struct {
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// DockerManifest is one entry of docker's manifest.json.
type DockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// ErrNotArchive is wrapped when a file is not an archive pinfold packed.
var ErrNotArchive = errors.New("not an image archive pinfold packed")

const maxDoc = 4 << 20

// ReadArchive reads the archive at path.
func ReadArchive(path string) (*Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &Archive{Path: path}
	want := map[string]bool{"index.json": true, MetaFile: true, SignatureFile: true, "manifest.json": true}
	docs, err := readEntries(f, want)
	if err != nil {
		return nil, err
	}
	idx, ok := docs["index.json"]
	if !ok {
		return nil, fmt.Errorf("%w: %s has no index.json", ErrNotArchive, path)
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(idx, &index); err != nil || len(index.Manifests) != 1 {
		return nil, fmt.Errorf("%w: %s: index.json does not name one manifest", ErrNotArchive, path)
	}
	a.Digest = index.Manifests[0].Digest
	if b, ok := docs[MetaFile]; ok {
		a.Meta = &AppMeta{}
		if err := json.Unmarshal(b, a.Meta); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, MetaFile, err)
		}
	}
	if b, ok := docs[SignatureFile]; ok {
		a.Signature = &Signature{}
		if err := json.Unmarshal(b, a.Signature); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, SignatureFile, err)
		}
	}
	if b, ok := docs["manifest.json"]; ok {
		if err := json.Unmarshal(b, &a.Docker); err != nil {
			return nil, fmt.Errorf("%s: manifest.json: %w", path, err)
		}
	}
	mname, err := blobName(a.Digest)
	if err != nil {
		return nil, err
	}
	if docs, err = readBlobs(f, map[string]string{mname: a.Digest}); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(docs[mname], &a.Manifest); err != nil {
		return nil, fmt.Errorf("%s: the manifest: %w", path, err)
	}
	cname, err := blobName(a.Manifest.Config.Digest)
	if err != nil {
		return nil, err
	}
	if docs, err = readBlobs(f, map[string]string{cname: a.Manifest.Config.Digest}); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(docs[cname], &a.Config); err != nil {
		return nil, fmt.Errorf("%s: the config: %w", path, err)
	}
	return a, nil
}

// readEntries reads the small files of the tar named in want.
func readEntries(f *os.File, want map[string]bool) (map[string][]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotArchive, f.Name(), err)
		}
		if !want[hdr.Name] || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if hdr.Size > maxDoc {
			return nil, fmt.Errorf("%s: %s is too large (%d bytes)", f.Name(), hdr.Name, hdr.Size)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		out[hdr.Name] = b
	}
}

// readBlobs reads the named blobs and checks each against its digest.
func readBlobs(f *os.File, want map[string]string) (map[string][]byte, error) {
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	out, err := readEntries(f, names)
	if err != nil {
		return nil, err
	}
	for n, d := range want {
		b, ok := out[n]
		if !ok {
			return nil, fmt.Errorf("%s: blob %s is missing", f.Name(), d)
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != d {
			return nil, fmt.Errorf("%s: blob %s does not match its digest", f.Name(), d)
		}
	}
	return out, nil
}

func blobName(d string) (string, error) {
	if len(d) != 71 || d[:7] != "sha256:" {
		return "", fmt.Errorf("%w: digest %q is not sha256", ErrNotArchive, d)
	}
	if _, err := hex.DecodeString(d[7:]); err != nil {
		return "", fmt.Errorf("%w: digest %q is not hex", ErrNotArchive, d)
	}
	return "blobs/sha256/" + d[7:], nil
}

// IsApp reports whether path names an app file by its name: pinfold run
// APP.pinfold runs it.
func IsApp(path string) bool {
	if len(path) <= len(".pinfold") || path[len(path)-len(".pinfold"):] != ".pinfold" {
		return false
	}
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// AppRoot is where an app's root image lies in its file.
type AppRoot struct {
	RootImage
	Offset int64 // of the squashfs's first byte in the file
	index  []byte
	blobs  map[string][2]int64 // "sha256:hex" -> offset, size
}

// ReadAppRoot finds the root image of the app file f (one pass over the
// tar's headers, skipping the data): nil when the app has none.
func ReadAppRoot(f *os.File) (*AppRoot, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var meta *AppMeta
	r := &AppRoot{Offset: -1, blobs: map[string][2]int64{}}
	var size int64
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotArchive, f.Name(), err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		// The tar reader has read exactly the header: the file's offset is
		// where the entry's data begins.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		switch {
		case hdr.Name == RootFile:
			r.Offset, size = off, hdr.Size
		case strings.HasPrefix(hdr.Name, "blobs/sha256/"):
			r.blobs["sha256:"+strings.TrimPrefix(hdr.Name, "blobs/sha256/")] = [2]int64{off, hdr.Size}
		case hdr.Name == MetaFile || hdr.Name == "index.json":
			if hdr.Size > maxDoc {
				return nil, fmt.Errorf("%s: %s is too large (%d bytes)", f.Name(), hdr.Name, hdr.Size)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			if hdr.Name == "index.json" {
				r.index = b
				continue
			}
			meta = &AppMeta{}
			if err := json.Unmarshal(b, meta); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", f.Name(), MetaFile, err)
			}
		}
	}
	if meta == nil || meta.Format != AppFormat || meta.Root == nil || r.Offset < 0 {
		return nil, nil
	}
	if meta.Root.Size != size {
		return nil, fmt.Errorf("%s: %s is %d bytes, %s says %d", f.Name(), RootFile, size, MetaFile, meta.Root.Size)
	}
	r.RootImage = *meta.Root
	return r, nil
}

// ErrDigest is wrapped when part of an app does not match its digest.
var ErrDigest = errors.New("does not match its digest")

// Verify checks the whole app file f against its digests, as a run that
// unpacks it would: the manifest index.json names, its config and every
// layer, and the root image against the digest pinfold.json gives it. So a
// file with a changed layer is refused whether the run mounts it or not.
func (r *AppRoot) Verify(f *os.File) error {
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(r.index, &index); err != nil || len(index.Manifests) != 1 {
		return fmt.Errorf("%w: %s: index.json does not name one manifest", ErrNotArchive, f.Name())
	}
	mb, err := r.blob(f, index.Manifests[0].Digest, true)
	if err != nil {
		return err
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return fmt.Errorf("%s: the manifest: %w", f.Name(), err)
	}
	// The root image is hashed beside the layers: about half of the file
	// each, on two CPUs.
	root := make(chan error, 1)
	go func() { root <- checkRegion(f, r.Offset, r.Size, r.Digest) }()
	for _, d := range append([]Descriptor{m.Config}, m.Layers...) {
		if _, err = r.blob(f, d.Digest, false); err != nil {
			break
		}
	}
	if rerr := <-root; err == nil && rerr != nil {
		err = fmt.Errorf("%s: the root image %w", f.Name(), rerr)
	}
	return err
}

// ConfigDigest returns the digest of the app's image config, which names
// its unpacked root in the store (bases/oci/HEX), reading the manifest
// index.json names and checking it against its digest.
func (r *AppRoot) ConfigDigest(f *os.File) (string, error) {
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(r.index, &index); err != nil || len(index.Manifests) != 1 {
		return "", fmt.Errorf("%w: %s: index.json does not name one manifest", ErrNotArchive, f.Name())
	}
	mb, err := r.blob(f, index.Manifests[0].Digest, true)
	if err != nil {
		return "", err
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return "", fmt.Errorf("%s: the manifest: %w", f.Name(), err)
	}
	return m.Config.Digest, nil
}

// blob checks one blob against its digest, and returns it when keep.
func (r *AppRoot) blob(f *os.File, digest string, keep bool) ([]byte, error) {
	at, ok := r.blobs[digest]
	if !ok {
		return nil, fmt.Errorf("%s: blob %s is missing", f.Name(), digest)
	}
	if keep {
		if at[1] > maxDoc {
			return nil, fmt.Errorf("%s: blob %s is too large", f.Name(), digest)
		}
		b := make([]byte, at[1])
		if _, err := f.ReadAt(b, at[0]); err != nil {
			return nil, err
		}
		if sum := sha256.Sum256(b); "sha256:"+hex.EncodeToString(sum[:]) != digest {
			return nil, fmt.Errorf("%s: blob %s %w", f.Name(), digest, ErrDigest)
		}
		return b, nil
	}
	if err := checkRegion(f, at[0], at[1], digest); err != nil {
		return nil, fmt.Errorf("%s: blob %s %w", f.Name(), digest, err)
	}
	return nil, nil
}

func checkRegion(f *os.File, off, size int64, digest string) error {
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.NewSectionReader(f, off, size), make([]byte, 1<<20))
	if err != nil {
		return err
	}
	if n != size || "sha256:"+hex.EncodeToString(h.Sum(nil)) != digest {
		return ErrDigest
	}
	return nil
}
