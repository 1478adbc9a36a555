package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// Media types this package reads.
const (
	mtOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mtOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mtOCIConfig      = "application/vnd.oci.image.config.v1+json"
	mtDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mtDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mtDockerConfig   = "application/vnd.docker.container.image.v1+json"

	mtLayerTar  = "application/vnd.oci.image.layer.v1.tar"
	mtLayerGzip = mtLayerTar + "+gzip"
	mtLayerZstd = mtLayerTar + "+zstd"
)

// Caps on what is read into memory.
const (
	maxIndexSize    = 16 << 20 // index.json, manifest.json, image indexes
	maxManifestSize = 4 << 20  // what registries accept
	maxConfigSize   = 32 << 20
	maxNesting      = 4 // image indexes inside image indexes
)

const (
	annotRefName        = "org.opencontainers.image.ref.name"
	annotContainerdName = "io.containerd.image.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *platform         `json:"platform"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant"`
}

func (p *platform) String() string {
	if p == nil {
		return "unknown platform"
	}
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// document is an image index or an image manifest: which one is told by
// the media type, or failing that by the fields present.
type document struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
	Config        *descriptor  `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type configFile struct {
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       ImageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// source is where an image's files are: a layout directory or the entries
// of an archive. Names are clean relative paths.
type source interface {
	// open opens the regular file name and returns its size.
	open(name string) (io.ReadCloser, int64, error)
}

// Open reads the image at path: an OCI layout directory, an oci-archive or
// a docker-archive, told apart by content. ref selects an image when the
// source holds several: in index.json, an entry's
// org.opencontainers.image.ref.name (or io.containerd.image.name)
// annotation or its digest; in a docker-archive, a RepoTag or the image id
// (config digest). Names compare as docker does, so "alpine" matches
// "docker.io/library/alpine:latest". An empty ref picks the only image;
// with several, the error lists them. From a multi-platform index Open
// picks linux/GOARCH, and an image whose config names another platform is
// an error.
//
// Open reads the index, manifest and config, checking each against its
// digest, and checks that every layer blob is there; the layers are read by
// [Layer.Open] and [Apply].
func Open(ctx context.Context, path, ref string) (*Image, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("opening image %s: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("opening image %s: %w", abs, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("opening image: %w", err)
	}
	var img *Image
	switch {
	case fi.IsDir():
		img, err = openLayout(ctx, dirSource(abs), "oci-layout", ref)
	case fi.Mode().IsRegular():
		img, err = openArchive(ctx, abs, ref)
	default:
		err = errors.New("not a directory or a regular file")
	}
	if err != nil {
		return nil, fmt.Errorf("opening image %s: %w", abs, err)
	}
	img.Source = abs
	return img, nil
}

// openArchive tells a docker-archive from an oci-archive by the files in it.
func openArchive(ctx context.Context, file, ref string) (*Image, error) {
	if err := checkPlainTar(file); err != nil {
		return nil, err
	}
	src, err := indexArchive(ctx, file)
	if err != nil {
		return nil, err
	}
	switch {
	case src.has("manifest.json"):
		return openDocker(ctx, src, ref)
	case src.has("oci-layout") && src.has("index.json"):
		return openLayout(ctx, src, "oci-archive", ref)
	}
	return nil, errors.New("not an image archive: no manifest.json (docker-archive), nor oci-layout and index.json (oci-archive)")
}

// openLayout reads an OCI image layout.
func openLayout(ctx context.Context, src source, format, ref string) (*Image, error) {
	b, err := readFile(src, "oci-layout", 64<<10)
	if errors.Is(err, os.ErrNotExist) && format == "oci-layout" {
		return nil, errors.New("not an OCI image layout: it has no oci-layout file")
	}
	if err != nil {
		return nil, err
	}
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &layout); err != nil {
		return nil, fmt.Errorf("reading oci-layout: %w", err)
	}
	if !strings.HasPrefix(layout.Version, "1.") {
		return nil, fmt.Errorf("unsupported image layout version %s", tarentry.Quote(layout.Version))
	}
	b, err = readFile(src, "index.json", maxIndexSize)
	if err != nil {
		return nil, err
	}
	var idx document
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("reading index.json: %w", err)
	}
	d, err := chooseRef(idx.Manifests, ref)
	if err != nil {
		return nil, err
	}
	d, m, err := resolveManifest(ctx, src, d)
	if err != nil {
		return nil, err
	}
	if m.Config == nil {
		return nil, fmt.Errorf("manifest %s has no config", d.Digest)
	}
	if mt := m.Config.MediaType; mt != mtOCIConfig && mt != mtDockerConfig {
		return nil, fmt.Errorf("manifest %s is not a container image: its config has media type %s", d.Digest, tarentry.Quote(mt))
	}
	b, err = readBlob(src, *m.Config, maxConfigSize)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(b, len(m.Layers))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	img := &Image{Format: format, ManifestDigest: d.Digest, ConfigDigest: m.Config.Digest, Config: cfg.Config}
	for i, ld := range m.Layers {
		if !isLayerType(ld.MediaType) {
			return nil, fmt.Errorf("layer %d (%s) has media type %s, which is not a tar layer", i+1, ld.Digest, tarentry.Quote(ld.MediaType))
		}
		name, err := blobName(ld.Digest)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		if err := checkBlob(src, name, ld); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		img.Layers = append(img.Layers, Layer{
			Digest: ld.Digest, DiffID: cfg.RootFS.DiffIDs[i], MediaType: ld.MediaType, Size: ld.Size,
			open: func() (io.ReadCloser, error) {
				rc, _, err := src.open(name)
				return rc, err
			},
		})
	}
	return img, nil
}

// resolveManifest follows image indexes from d down to one manifest
// (this machine's platform's), and returns it and its descriptor.
func resolveManifest(ctx context.Context, src source, d descriptor) (descriptor, document, error) {
	for depth := 0; ; depth++ {
		if err := ctx.Err(); err != nil {
			return d, document{}, err
		}
		max := int64(maxManifestSize)
		if isIndexType(d.MediaType) {
			max = maxIndexSize
		}
		b, err := readBlob(src, d, max)
		if err != nil {
			return d, document{}, err
		}
		var doc document
		if err := json.Unmarshal(b, &doc); err != nil {
			return d, document{}, fmt.Errorf("reading %s: %w", d.Digest, err)
		}
		if doc.SchemaVersion != 2 {
			return d, document{}, fmt.Errorf("%s has schema version %d; only 2 is read", d.Digest, doc.SchemaVersion)
		}
		mt := cmpOr(d.MediaType, doc.MediaType)
		switch {
		case isIndexType(mt) || mt == "" && doc.Config == nil && doc.Manifests != nil:
			if depth >= maxNesting {
				return d, document{}, fmt.Errorf("image indexes nest more than %d deep", maxNesting)
			}
			next, err := choosePlatform(doc.Manifests)
			if err != nil {
				return d, document{}, fmt.Errorf("index %s: %w", d.Digest, err)
			}
			d = next
		case mt == mtOCIManifest || mt == mtDockerManifest || mt == "" && doc.Config != nil:
			return d, doc, nil
		default:
			return d, document{}, fmt.Errorf("%s has media type %s, which is not an image manifest or index", d.Digest, tarentry.Quote(mt))
		}
	}
}

// RefError is an index whose images the reference does not choose one
// of: it names none, or several, or none was named and there are several.
type RefError struct {
	Ref   string   // the reference asked for ("" for none)
	Found int      // how many entries it matched
	Names []string // the names the index lists, as a user would give them
}

func (e *RefError) Error() string {
	list := strings.Join(e.Names, ", ")
	switch {
	case e.Ref == "":
		return fmt.Sprintf("the index lists %d images; choose one: %s", len(e.Names), list)
	case e.Found == 0:
		return fmt.Sprintf("no image named %s; the index lists: %s", tarentry.Quote(e.Ref), list)
	}
	return fmt.Sprintf("%d images are named %s; the index lists: %s", e.Found, tarentry.Quote(e.Ref), list)
}

// chooseRef picks the entry of index.json that ref names.
func chooseRef(ds []descriptor, ref string) (descriptor, error) {
	if len(ds) == 0 {
		return descriptor{}, errors.New("index.json lists no image")
	}
	var found []descriptor
	for _, d := range ds {
		if ref == "" || d.Digest == ref || refMatch(d.Annotations[annotRefName], ref) || refMatch(d.Annotations[annotContainerdName], ref) {
			found = append(found, d)
		}
	}
	if len(found) > 1 {
		// Several entries of one name are usually one image per platform.
		var ours []descriptor
		for _, d := range found {
			if d.Platform == nil || isOurs(d.Platform) {
				ours = append(ours, d)
			}
		}
		if len(ours) == 1 {
			found = ours
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	var names []string
	for _, d := range ds {
		n := cmpOr(d.Annotations[annotRefName], d.Annotations[annotContainerdName], d.Digest)
		if d.Platform != nil {
			n += " (" + d.Platform.String() + ")"
		}
		names = append(names, n)
	}
	return descriptor{}, &RefError{Ref: ref, Found: len(found), Names: names}
}

// choosePlatform picks this machine's image from an image index.
func choosePlatform(ds []descriptor) (descriptor, error) {
	var best *descriptor
	for i := range ds {
		d := &ds[i]
		if !isOurs(d.Platform) {
			continue
		}
		// A variant-less entry is the baseline (amd64 v1, arm64 v8).
		if best == nil || best.Platform.Variant != "" && d.Platform.Variant == "" {
			best = d
		}
	}
	if best != nil {
		return *best, nil
	}
	var have []string
	for _, d := range ds {
		have = append(have, d.Platform.String())
	}
	return descriptor{}, fmt.Errorf("no image for linux/%s; it has %s", runtime.GOARCH, strings.Join(have, ", "))
}

func isOurs(p *platform) bool {
	return p != nil && p.OS == "linux" && p.Architecture == runtime.GOARCH
}

// parseConfig reads an image config and checks that it fits a manifest
// of layers layers and this machine.
func parseConfig(b []byte, layers int) (*configFile, error) {
	var cfg configFile
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, err
	}
	if cfg.RootFS.Type != "layers" {
		return nil, fmt.Errorf("rootfs type is %s, not \"layers\"", tarentry.Quote(cfg.RootFS.Type))
	}
	if len(cfg.RootFS.DiffIDs) != layers {
		return nil, fmt.Errorf("it lists %d diff ids for %d layers", len(cfg.RootFS.DiffIDs), layers)
	}
	for _, id := range cfg.RootFS.DiffIDs {
		if _, _, err := parseDigest(id); err != nil {
			return nil, fmt.Errorf("diff id: %w", err)
		}
	}
	if (cfg.OS != "" && cfg.OS != "linux") || (cfg.Architecture != "" && cfg.Architecture != runtime.GOARCH) {
		return nil, fmt.Errorf("the image is for %s/%s; this machine is linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
	}
	return &cfg, nil
}

// readFile reads the small file name from src.
func readFile(src source, name string, max int64) ([]byte, error) {
	rc, size, err := src.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d read", name, size, max)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return b, nil
}

// readBlob reads the blob d describes and checks its size and digest.
func readBlob(src source, d descriptor, max int64) ([]byte, error) {
	name, err := blobName(d.Digest)
	if err != nil {
		return nil, err
	}
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("blob %s is %d bytes, more than the %d read", d.Digest, d.Size, max)
	}
	if err := checkBlob(src, name, d); err != nil {
		return nil, err
	}
	b, err := readFile(src, name, max)
	if err != nil {
		return nil, err
	}
	if err := checkDigest(d.Digest, b); err != nil {
		return nil, fmt.Errorf("blob %w", err)
	}
	return b, nil
}

// checkBlob checks that the blob name is there with the size d gives.
func checkBlob(src source, name string, d descriptor) error {
	rc, size, err := src.open(name)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blob %s is missing", d.Digest)
	}
	if err != nil {
		return err
	}
	rc.Close()
	if size != d.Size {
		return fmt.Errorf("blob %s is %d bytes, not the %d its descriptor gives: %w", d.Digest, size, d.Size, ErrDigest)
	}
	return nil
}

func checkDigest(digest string, b []byte) error {
	alg, want, err := parseDigest(digest)
	if err != nil {
		return err
	}
	h := newHash(alg)
	h.Write(b)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s has digest %s:%s: %w", digest, alg, got, ErrDigest)
	}
	return nil
}

// parseDigest splits "<alg>:<hex>" and checks it; sha256 and sha512 are
// the algorithms the image spec registers.
func parseDigest(d string) (alg, hexSum string, err error) {
	alg, hexSum, _ = strings.Cut(d, ":")
	n := 0
	switch alg {
	case "sha256":
		n = 64
	case "sha512":
		n = 128
	default:
		return "", "", fmt.Errorf("unsupported digest %s", tarentry.Quote(d))
	}
	if len(hexSum) != n || !isLowerHex(hexSum) {
		return "", "", fmt.Errorf("malformed digest %s", tarentry.Quote(d))
	}
	return alg, hexSum, nil
}

func newHash(alg string) hash.Hash {
	if alg == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blobName is where an OCI layout keeps the blob with digest d.
func blobName(d string) (string, error) {
	alg, h, err := parseDigest(d)
	if err != nil {
		return "", err
	}
	return "blobs/" + alg + "/" + h, nil
}

func isIndexType(mt string) bool { return mt == mtOCIIndex || mt == mtDockerList }

// isLayerType reports whether mt is a tar layer, plain, gzip or zstd; the
// compression is told from the blob's first bytes, as docker does.
func isLayerType(mt string) bool {
	for _, p := range [...]string{"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.nondistributable.v1.tar"} {
		if rest, ok := strings.CutPrefix(mt, p); ok {
			return rest == "" || rest == "+gzip" || rest == "+zstd"
		}
	}
	switch mt {
	case "application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
		"application/vnd.docker.image.rootfs.diff.tar":
		return true
	}
	return false
}

// refMatch reports whether the image name has matches ref, exactly or as
// docker normalises names: "alpine" is "docker.io/library/alpine:latest".
func refMatch(has, ref string) bool {
	if has == "" || ref == "" {
		return false
	}
	return has == ref || normRef(has) == normRef(ref)
}

func normRef(s string) string {
	for _, p := range [...]string{"docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/", "localhost/"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			s = rest
			break
		}
	}
	if last := s[strings.LastIndexByte(s, '/')+1:]; !strings.ContainsAny(last, ":@") {
		s += ":latest"
	}
	return s
}

func cmpOr(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// dirSource is an OCI layout directory.
type dirSource string

func (d dirSource) open(name string) (io.ReadCloser, int64, error) {
	f, err := os.Open(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", name)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// sniff names the compression that b, the first bytes of a layer, starts.
func sniff(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return "gzip"
	case bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd"
	case bytes.HasPrefix(b, []byte("\xfd7zXZ\x00")):
		return "xz"
	case bytes.HasPrefix(b, []byte("BZh")):
		return "bzip2"
	}
	return ""
}

// cleanArchiveName makes an archive entry name, or a name manifest.json
// gives, relative and clean ("/a", "./a" and "../a" are all "a"); false
// for an empty or overlong one.
func cleanArchiveName(n string) (string, bool) {
	n = path.Clean("/" + n)[1:]
	return n, n != "" && len(n) <= tarentry.MaxName
}
