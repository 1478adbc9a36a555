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
	rep := fileReply{fw}
	if req.Path == "" {
		rep.fail(errors.New("no path given"))
		return
	}
	switch req.Op {
	case "stat":
		fi, err := os.Lstat(req.Path)
		if err != nil {
			rep.fail(err)
			return
		}
		rep.ok(fileInfo(filepath.Base(req.Path), fi, req.Path))
	case "list":
		ents, err := os.ReadDir(req.Path)
		if err != nil {
			rep.fail(err)
			return
		}
		list := []FileInfo{}
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				list = append(list, fileInfo(e.Name(), fi, filepath.Join(req.Path, e.Name())))
			}
		}
		rep.ok(list)
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
			rep.fail(err)
			return
		}
		rep.ok(struct{}{})
	case "read":
		sendFile(rep, req.Path)
	case "write":
		receiveFile(r, rep, req)
	}
}

// fileReply answers a file operation: OK with a value, or the exit
// status of an error.
type fileReply struct{ fw *frameWriter }

func (f fileReply) ok(v any) {
	b, _ := json.Marshal(v)
	f.fw.frame(FrameOK, b)
}

func (f fileReply) fail(err error) {
	b, _ := json.Marshal(exitFor(err))
	f.fw.frame(FrameExit, b)
}

// sendFile answers a read: the file's info, its content as stdout
// frames, and an exit.
func sendFile(rep fileReply, path string) {
	f, err := os.Open(path)
	if err != nil {
		rep.fail(err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = errors.New(path + " is a directory")
	}
	if err != nil {
		rep.fail(err)
		return
	}
	rep.ok(fileInfo(filepath.Base(path), fi, path))
	if _, err := io.Copy(stream{rep.fw, FrameStdout}, f); err != nil {
		rep.fail(err)
		return
	}
	b, _ := json.Marshal(Exit{})
	rep.fw.frame(FrameExit, b)
}

// receiveFile answers a write: the stdin frames up to EOF go to a
// temporary file beside the path, renamed over it once whole (without
// set-id bits), so that a failed or abandoned upload leaves nothing.
func receiveFile(r *bufio.Reader, rep fileReply, req *Request) {
	mode := fs.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	mode &^= fs.ModeSetuid | fs.ModeSetgid
	dir := filepath.Dir(req.Path)
	tmp, err := os.CreateTemp(dir, ".pinfold-upload-*")
	if err != nil {
		rep.fail(err)
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
		rep.fail(werr)
		return
	}
	rep.ok(struct{}{})
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
