package oci

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/pinfold/pinfold/internal/tarentry"
)

// maxArchiveEntries caps the entries of an image archive: each costs a
// little memory in the index.
const maxArchiveEntries = 200_000

// tarSource is an image archive, indexed once and read in place: each open
// opens the file again, so layers can be read concurrently and the Image
// needs no closing. A file changed after Open is caught by the digests.
type tarSource struct {
	file string
	ents map[string]tarEntry
}

type tarEntry struct {
	off, size int64
	typ       byte
	link      string
}

// checkPlainTar refuses a compressed archive with a hint rather than a tar
// error: entries are read at their offsets, which a compressed stream
// does not have.
func checkPlainTar(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [6]byte
	n, _ := io.ReadFull(f, b[:])
	if c := sniff(b[:n]); c != "" {
		return fmt.Errorf("the archive is %s-compressed; decompress it first (image archives are read in place)", c)
	}
	return nil
}

// indexArchive reads the headers of the tar file and notes where each
// regular file's data starts.
func indexArchive(ctx context.Context, file string) (*tarSource, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	src := &tarSource{file: file, ents: make(map[string]tarEntry)}
	// tar.Reader reads exactly the header blocks and seeks over file
	// data, so after Next the file offset is where the entry's data is.
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil && (hdr == nil || !errors.Is(err, tar.ErrInsecurePath)) {
			return nil, fmt.Errorf("reading the archive: %w", err)
		}
		if n >= maxArchiveEntries {
			return nil, fmt.Errorf("the archive has more than %d entries", maxArchiveEntries)
		}
		name, ok := cleanArchiveName(hdr.Name)
		if !ok {
			continue
		}
		e := tarEntry{typ: hdr.Typeflag, link: hdr.Linkname}
		switch hdr.Typeflag {
		case tar.TypeReg:
			if e.off, err = f.Seek(0, io.SeekCurrent); err != nil {
				return nil, err
			}
			if e.size = hdr.Size; e.size > fi.Size()-e.off {
				return nil, fmt.Errorf("the archive is truncated in %s", tarentry.Quote(hdr.Name))
			}
		case tar.TypeSymlink, tar.TypeLink:
		default:
			// A later entry of another type hides an earlier file.
			delete(src.ents, name)
			continue
		}
		src.ents[name] = e
	}
	if len(src.ents) == 0 {
		return nil, errors.New("not an image archive: it holds no files")
	}
	return src, nil
}

func (t *tarSource) has(name string) bool {
	_, ok := t.ents[name]
	return ok
}

// lookup finds the regular file name, following links inside the archive
// as docker save's layer.tar symlinks need.
func (t *tarSource) lookup(name string) (tarEntry, error) {
	for range 16 {
		e, ok := t.ents[name]
		switch {
		case !ok:
			return tarEntry{}, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		case e.typ == tar.TypeReg:
			return e, nil
		case e.typ == tar.TypeSymlink && !path.IsAbs(e.link):
			name, ok = cleanArchiveName(path.Dir(name) + "/" + e.link)
		default:
			name, ok = cleanArchiveName(e.link)
		}
		if !ok {
			return tarEntry{}, fmt.Errorf("archive entry %s links to %s", tarentry.Quote(name), tarentry.Quote(e.link))
		}
	}
	return tarEntry{}, fmt.Errorf("archive entry %s: too many links", tarentry.Quote(name))
}

func (t *tarSource) open(name string) (io.ReadCloser, int64, error) {
	e, err := t.lookup(name)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(t.file)
	if err != nil {
		return nil, 0, err
	}
	return &sectionFile{io.NewSectionReader(f, e.off, e.size), f}, e.size, nil
}

type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s *sectionFile) Close() error { return s.f.Close() }

// dockerImage is one entry of a docker-archive's manifest.json.
type dockerImage struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// openDocker reads a docker-archive. Its ManifestDigest is its config
// digest: see the package doc.
func openDocker(ctx context.Context, src *tarSource, ref string) (*Image, error) {
	b, err := readFile(src, "manifest.json", maxIndexSize)
	if err != nil {
		return nil, err
	}
	var ims []dockerImage
	if err := json.Unmarshal(b, &ims); err != nil {
		return nil, fmt.Errorf("reading manifest.json: %w", err)
	}
	im, cfgBytes, err := chooseDocker(src, ims, ref)
	if err != nil {
		return nil, err
	}
	cfgDigest := sha256Digest(cfgBytes)
	cfgName, _ := cleanArchiveName(im.Config)
	if want := dockerDigest(cfgName, ".json"); want != "" && want != cfgDigest {
		return nil, fmt.Errorf("config %s has digest %s: %w", tarentry.Quote(im.Config), cfgDigest, ErrDigest)
	}
	cfg, err := parseConfig(cfgBytes, len(im.Layers))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", cfgDigest, err)
	}
	img := &Image{Format: "docker-archive", ManifestDigest: cfgDigest, ConfigDigest: cfgDigest, Config: cfg.Config}
	for i, lp := range im.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name, ok := cleanArchiveName(lp)
		if !ok {
			return nil, fmt.Errorf("layer %d has no usable name: %s", i+1, tarentry.Quote(lp))
		}
		rc, size, err := src.open(name)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		var magic [6]byte
		n, err := io.ReadFull(rc, magic[:])
		rc.Close()
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			return nil, fmt.Errorf("layer %d: reading %s: %w", i+1, name, err)
		}
		l := Layer{DiffID: cfg.RootFS.DiffIDs[i], Size: size, Digest: dockerDigest(name, "")}
		switch sniff(magic[:n]) {
		case "":
			l.MediaType = mtLayerTar
			l.Digest = cmpOr(l.Digest, l.DiffID)
		case "gzip":
			l.MediaType = mtLayerGzip
		case "zstd":
			l.MediaType = mtLayerZstd
		default:
			return nil, fmt.Errorf("layer %d (%s) is %s-compressed; layers are tar, tar+gzip or tar+zstd", i+1, tarentry.Quote(lp), sniff(magic[:n]))
		}
		l.open = func() (io.ReadCloser, error) {
			rc, _, err := src.open(name)
			return rc, err
		}
		img.Layers = append(img.Layers, l)
	}
	return img, nil
}

// chooseDocker picks the image ref names and returns it with its config.
func chooseDocker(src *tarSource, ims []dockerImage, ref string) (dockerImage, []byte, error) {
	if len(ims) == 0 {
		return dockerImage{}, nil, errors.New("manifest.json lists no image")
	}
	config := func(im dockerImage) ([]byte, error) {
		name, ok := cleanArchiveName(im.Config)
		if !ok {
			return nil, fmt.Errorf("manifest.json names config %s", tarentry.Quote(im.Config))
		}
		return readFile(src, name, maxConfigSize)
	}
	var found []int
	for i, im := range ims {
		ok := ref == ""
		for _, t := range im.RepoTags {
			ok = ok || refMatch(t, ref)
		}
		if !ok && strings.HasPrefix(ref, "sha256:") {
			// An image id: the config's digest.
			b, err := config(im)
			if err != nil {
				return dockerImage{}, nil, err
			}
			ok = sha256Digest(b) == ref
		}
		if ok {
			found = append(found, i)
		}
	}
	if len(found) == 1 {
		b, err := config(ims[found[0]])
		return ims[found[0]], b, err
	}
	var names []string
	for _, im := range ims {
		n := strings.Join(im.RepoTags, " ")
		if n == "" {
			c, _ := cleanArchiveName(im.Config)
			n = cmpOr(dockerDigest(c, ".json"), im.Config)
		}
		names = append(names, n)
	}
	list := strings.Join(names, ", ")
	switch {
	case ref == "":
		return dockerImage{}, nil, fmt.Errorf("the archive holds %d images; choose one: %s", len(ims), list)
	case len(found) == 0:
		return dockerImage{}, nil, fmt.Errorf("no image named %s; the archive holds: %s", tarentry.Quote(ref), list)
	}
	return dockerImage{}, nil, fmt.Errorf("%d images are named %s; the archive holds: %s", len(found), tarentry.Quote(ref), list)
}

// dockerDigest returns the digest a docker-archive file name carries:
// "blobs/sha256/<hex>" as docker 25 and later write, or "<hex><ext>" (the
// config, named by the image id). Other names carry none: legacy
// "<id>/layer.tar" ids are not digests of the file.
func dockerDigest(name, ext string) string {
	if h, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && len(h) == 64 && isLowerHex(h) {
		return "sha256:" + h
	}
	if h, ok := strings.CutSuffix(name, ext); ok && ext != "" && len(h) == 64 && isLowerHex(h) {
		return "sha256:" + h
	}
	return ""
}
