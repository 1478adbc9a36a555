package agent

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// restore replays a layer (a snapshot: a changeset exported by
// changeset.Export, paths relative to "/") onto the sandbox's file system,
// inside the sandbox: writes land in the new session's changeset and /tmp
// as the commands' would, with the sandbox's own confinement.
func (a *agent) restore(c *net.UnixConn, r *bufio.Reader, fw *frameWriter) {
	pr, pw := io.Pipe()
	go func() {
		var buf []byte
		for {
			t, b, err := readFrame(r, buf)
			if err != nil {
				pw.CloseWithError(errors.New("the client went away"))
				return
			}
			buf = b
			if t == FrameStdinEOF {
				pw.Close()
				return
			}
			if t == FrameStdin {
				if _, err := pw.Write(b); err != nil {
					return
				}
			}
		}
	}()
	n, err := applyLayer(pr)
	io.Copy(io.Discard, pr)
	if err != nil {
		b, _ := json.Marshal(Exit{Code: 1, Error: err.Error()})
		fw.frame(FrameExit, b)
		return
	}
	b, _ := json.Marshal(map[string]int{"entries": n})
	fw.frame(FrameOK, b)
}

func applyLayer(r io.Reader) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		name := path.Clean("/" + h.Name)
		if strings.Contains(h.Name, "..") || name == "/" {
			if name == "/" {
				continue
			}
			return n, fmt.Errorf("refused path %q", h.Name)
		}
		dir, base := path.Split(name)
		n++
		switch {
		case base == ".wh..wh..opq":
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
			continue
		case strings.HasPrefix(base, ".wh."):
			if err := os.RemoveAll(filepath.Join(dir, strings.TrimPrefix(base, ".wh."))); err != nil {
				return n, err
			}
			continue
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&os.ModeSticky
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := os.Lstat(name); err == nil && !fi.IsDir() {
				os.Remove(name)
			}
			if err := os.MkdirAll(name, 0o755); err != nil {
				return n, err
			}
			os.Chmod(name, mode)
		case tar.TypeReg:
			os.RemoveAll(name)
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
			if err != nil {
				return n, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, err
			}
			os.Chtimes(name, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			os.RemoveAll(name)
			if err := os.Symlink(h.Linkname, name); err != nil {
				return n, err
			}
		case tar.TypeLink:
			target := path.Clean("/" + h.Linkname)
			os.RemoveAll(name)
			if err := os.Link(target, name); err != nil {
				return n, err
			}
		default:
			// Devices and fifos are the sandbox's to make, not a snapshot's.
		}
	}
}
