package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The agent's file and port operations. They run inside the sandbox, as
// its user: a session sees its own files only, through its own mounts.

func fileInfo(name string, fi os.FileInfo, full string) FileInfo {
	info := FileInfo{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Modified: fi.ModTime().UTC()}
	switch {
	case fi.Mode().IsRegular():
		info.Type = "file"
	case fi.IsDir():
		info.Type = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		info.Type = "symlink"
		info.Target, _ = os.Readlink(full)
	default:
		info.Type = "other"
	}
	return info
}

func exitFor(err error) Exit {
	e := Exit{Code: 1, Error: err.Error()}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.NotFound = true
	case errors.Is(err, fs.ErrPermission):
		e.NotExecutable = true // "not permitted"
	}
	return e
}

func (a *agent) fileOp(c *net.UnixConn, r *bufio.Reader, fw *frameWriter, req *Request) {
	fail := func(err error) {
		b, _ := json.Marshal(exitFor(err))
		fw.frame(FrameExit, b)
	}
	ok := func(v any) {
		b, _ := json.Marshal(v)
		fw.frame(FrameOK, b)
	}
	if req.Path == "" {
		fail(errors.New("no path given"))
		return
	}
	switch req.Op {
	case "stat":
		fi, err := os.Lstat(req.Path)
		if err != nil {
			fail(err)
			return
		}
		ok(fileInfo(filepath.Base(req.Path), fi, req.Path))
	case "list":
		ents, err := os.ReadDir(req.Path)
		if err != nil {
			fail(err)
			return
		}
		list := []FileInfo{}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				list = append(list, fileInfo(e.Name(), fi, filepath.Join(req.Path, e.Name())))
			}
		}
		ok(list)
	case "remove":
		var err error
		if req.Recursive {
			if _, err = os.Lstat(req.Path); err == nil {
				err = os.RemoveAll(req.Path)
			}
		} else {
			err = os.Remove(req.Path)
		}
		if err != nil {
			fail(err)
			return
		}
		ok(struct{}{})
	case "read":
		f, err := os.Open(req.Path)
		if err != nil {
			fail(err)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err == nil && fi.IsDir() {
			err = errors.New(req.Path + " is a directory")
		}
		if err != nil {
			fail(err)
			return
		}
		ok(fileInfo(filepath.Base(req.Path), fi, req.Path))
		if _, err := io.Copy(stream{fw, FrameStdout}, f); err != nil {
			fail(err)
			return
		}
		b, _ := json.Marshal(Exit{})
		fw.frame(FrameExit, b)
	case "write":
		mode := fs.FileMode(req.Mode & 0o7777)
		if mode == 0 {
			mode = 0o644
		}
		mode &^= fs.ModeSetuid | fs.ModeSetgid
		dir := filepath.Dir(req.Path)
		tmp, err := os.CreateTemp(dir, ".pinfold-upload-*")
		if err != nil {
			fail(err)
			return
		}
		defer os.Remove(tmp.Name())
		var werr error
		var buf []byte
		for {
			t, b, err := readFrame(r, buf)
			if err != nil {
				tmp.Close()
				return // the client went away: nothing is written
			}
			buf = b
			if t == FrameStdinEOF {
				break
			}
			if t == FrameStdin && werr == nil {
				_, werr = tmp.Write(b)
			}
		}
		if werr == nil {
			werr = tmp.Chmod(mode)
		}
		if err := tmp.Close(); werr == nil {
			werr = err
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), req.Path)
		}
		if werr != nil {
			fail(werr)
			return
		}
		ok(struct{}{})
	}
}

// connect splices the client's connection to a TCP port of the sandbox's
// loopback: ports are forwarded through the agent, whatever the network.
func (a *agent) connect(c *net.UnixConn, r *bufio.Reader, fw *frameWriter, req *Request) {
	if req.Port <= 0 || req.Port > 65535 {
		b, _ := json.Marshal(Exit{Code: 1, Error: "invalid port " + strconv.Itoa(req.Port)})
		fw.frame(FrameExit, b)
		return
	}
	t, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)), 5*time.Second)
	if err != nil {
		b, _ := json.Marshal(Exit{Code: 1, Error: err.Error()})
		fw.frame(FrameExit, b)
		return
	}
	defer t.Close()
	fw.frame(FrameOK, []byte("{}"))
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(t, r) // what the client sent after the request, buffered or not
		t.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		io.Copy(c, t)
		c.CloseWrite()
		done <- struct{}{}
	}()
	<-done
	<-done
}
