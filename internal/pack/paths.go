package pack

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// ImagePaths lists what the image's layers hold, read from the archive
// without unpacking it: every path ("/usr/bin/sh", the parents of each
// entry included), true for a symbolic link. A path a layer deletes (a
// whiteout) is listed too: the list errs on the side of holding more.
func (a *Archive) ImagePaths() (map[string]bool, error) {
	layers := map[string]bool{}
	for _, l := range a.Manifest.Layers {
		n, err := blobName(l.Digest)
		if err != nil {
			return nil, err
		}
		layers[n] = true
	}
	f, err := os.Open(a.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	paths := map[string]bool{"/": false}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Path, err)
		}
		if !layers[hdr.Name] {
			continue
		}
		delete(layers, hdr.Name)
		zr, err := gzip.NewReader(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: layer %s: %w", a.Path, hdr.Name, err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: layer %s: %w", a.Path, hdr.Name, err)
			}
			p := path.Clean("/" + h.Name)
			dir, base := path.Split(p)
			base = strings.TrimPrefix(base, ".wh.")
			if base == ".wh..opq" {
				p = path.Clean(dir)
			} else {
				p = path.Join(dir, base)
			}
			paths[p] = paths[p] || h.Typeflag == tar.TypeSymlink
			for d := path.Dir(p); d != "/"; d = path.Dir(d) {
				if _, ok := paths[d]; ok {
					break
				}
				paths[d] = false
			}
		}
	}
	if len(layers) > 0 {
		return nil, fmt.Errorf("%s: %d layers are missing", a.Path, len(layers))
	}
	return paths, nil
}

// CoversOwn says why a mount at target would hide or replace the app's
// own directories, or "" when it would not: target is, holds or is below
// the app's working directory or its packed workspace. It reads nothing.
func (a *Archive) CoversOwn(target string) string {
	t := path.Clean("/" + target)
	c := a.Config.Config
	for _, own := range []struct{ p, what string }{{c.WorkingDir, "its working directory"}, {c.Labels[LabelWorkspace], "its packed workspace"}} {
		if own.p == "" {
			continue
		}
		p := path.Clean("/" + own.p)
		if p == "/" {
			continue // the whole image: what Covers checks
		}
		if t == p || within(t, p) || within(p, t) {
			return "the app's " + p + " (" + own.what + ")"
		}
	}
	return ""
}

// Covers says why a mount at target would hide or replace what the app
// holds, or "" when it would not: what [Archive.CoversOwn] says, or
// target is or holds a path of the image, or goes through a symbolic link
// of the image (the mount would land where the link points). paths is
// [Archive.ImagePaths].
func (a *Archive) Covers(target string, paths map[string]bool) string {
	if why := a.CoversOwn(target); why != "" {
		return why
	}
	t := path.Clean("/" + target)
	if _, ok := paths[t]; ok {
		return "the app's " + t + " (a path of its image)"
	}
	for d := path.Dir(t); d != "/"; d = path.Dir(d) {
		if paths[d] {
			return "the app's " + d + " (a symbolic link of its image)"
		}
	}
	for p := range paths {
		if within(p, t) {
			return "the app's files below " + t
		}
	}
	return ""
}

// within reports whether p is strictly below dir.
func within(p, dir string) bool {
	return dir == "/" && p != "/" || strings.HasPrefix(p, dir+"/")
}
