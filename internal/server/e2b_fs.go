package server

// envd's filesystem service: Stat, ListDir, MakeDir, Move, Remove and
// WatchDir over the session's agent (see e2b_envd.go).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/session"
)

// entryInfo is the filesystem service's EntryInfo.
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

func toEntry(dir string, fi *agent.FileInfo) entryInfo {
	e := entryInfo{Name: fi.Name, Path: dir, Size: strconv.FormatInt(fi.Size, 10), Mode: fi.Mode,
		Permissions: fs.FileMode(fi.Mode).String(), Owner: "sandbox", Group: "sandbox"}
	if !fi.Modified.IsZero() {
		e.ModifiedTime = fi.Modified.UTC().Format(time.RFC3339Nano)
	}
	switch fi.Type {
	case "file":
		e.Type = "FILE_TYPE_FILE"
	case "dir":
		e.Type = "FILE_TYPE_DIRECTORY"
		e.Mode |= uint32(fs.ModeDir)
		e.Permissions = (fs.FileMode(fi.Mode) | fs.ModeDir).String()
	case "symlink":
		e.Type = "FILE_TYPE_SYMLINK"
		t := fi.Target
		e.SymlinkTarget = &t
	default:
		e.Type = "FILE_TYPE_UNSPECIFIED"
	}
	return e
}

// fsError is the Connect error of a failed file operation.
func fsError(err error) *rpcError {
	var re *rpcError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, fs.ErrNotExist):
		return rpcErr("not_found", "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return rpcErr("permission_denied", "%v", err)
	}
	var oe *agent.OpError
	if errors.As(err, &oe) {
		return rpcErr("invalid_argument", "%v", err)
	}
	return rpcErr("unavailable", "%v", err)
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

func readPath(body []byte) (pathRequest, *rpcError) {
	var req pathRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Path == "" {
		return req, rpcErr("invalid_argument", "a path is expected")
	}
	return req, nil
}

func stat(ctx context.Context, sock, p string) (entryInfo, error) {
	fi, err := agent.Stat(ctx, sock, p)
	if err != nil {
		return entryInfo{}, err
	}
	return toEntry(p, fi), nil
}

func fsStat(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	ent, err := stat(ctx, sock, req.Path)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

// maxListed bounds a ListDir answer and a WatchDir snapshot: a listing of
// the whole root, at any depth, held in the server's memory (and, for a
// watcher, made every watchEvery) must stop somewhere.
const maxListed = 100_000

// errListed is a listing past maxListed.
var errListed = rpcErr("resource_exhausted", "more than %d entries: list a smaller tree, or less deep", maxListed)

func fsListDir(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	depth := max(req.Depth, 1)
	out := []entryInfo{}
	var walk func(dir string, d uint32) error
	walk = func(dir string, d uint32) error {
		list, err := agent.List(ctx, sock, dir)
		if err != nil {
			return err
		}
		for i := range list {
			if len(out) >= maxListed {
				return errListed
			}
			full := path.Join(dir, list[i].Name)
			out = append(out, toEntry(full, &list[i]))
			if list[i].Type == "dir" && d < depth {
				if err := walk(full, d+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(req.Path, 1); err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entries": out}, nil
}

// run runs a command of the sandbox's (for what the agent has no op for).
func run(ctx context.Context, sock string, args ...string) error {
	var errb capped
	errb.max = 4096
	e, err := agent.Exec(ctx, sock, &agent.Request{Args: args}, agent.ExecStreams{Stderr: &errb})
	if err != nil {
		return err
	}
	if e.Code != 0 || e.Error != "" {
		return fmt.Errorf("%s: %s%s", args[0], strings.TrimSpace(string(errb.b)), e.Error)
	}
	return nil
}

func fsMakeDir(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	if _, err := agent.Stat(ctx, sock, req.Path); err == nil {
		return nil, rpcErr("already_exists", "%s exists", req.Path)
	}
	if err := run(ctx, sock, "mkdir", "-p", "--", req.Path); err != nil {
		return nil, rpcErr("invalid_argument", "%v", err)
	}
	ent, err := stat(ctx, sock, req.Path)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

func fsMove(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	var req struct{ Source, Destination string }
	if err := json.Unmarshal(body, &req); err != nil || req.Source == "" || req.Destination == "" {
		return nil, rpcErr("invalid_argument", "source and destination are expected")
	}
	if _, err := agent.Stat(ctx, sock, req.Source); err != nil {
		return nil, fsError(err)
	}
	if err := run(ctx, sock, "mv", "-T", "-f", "--", req.Source, req.Destination); err != nil {
		return nil, rpcErr("invalid_argument", "%v", err)
	}
	ent, err := stat(ctx, sock, req.Destination)
	if err != nil {
		return nil, fsError(err)
	}
	return map[string]any{"entry": ent}, nil
}

func fsRemove(ctx context.Context, sock string, body []byte) (any, *rpcError) {
	req, e := readPath(body)
	if e != nil {
		return nil, e
	}
	if err := agent.Remove(ctx, sock, req.Path, true); err != nil {
		return nil, fsError(err)
	}
	return struct{}{}, nil
}

// watchDir watches a directory by listing it every watchEvery and
// sending what changed: the agent has no inotify of its own, and a
// listing sees the sandbox's writes whatever makes them.
func (s *Server) watchDir(ctx context.Context, rec *session.Record, body []byte, sw *streamWriter) *rpcError {
	var req struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Path == "" {
		return rpcErr("invalid_argument", "a path is expected")
	}
	sock := s.st.Sock(rec.ID)
	prev, err := listTree(ctx, sock, req.Path, req.Recursive)
	if err != nil {
		return fsError(err)
	}
	if sw.send(map[string]any{"start": struct{}{}}) != nil {
		return nil
	}
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := listTree(ctx, sock, req.Path, req.Recursive)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fsError(err)
		}
		evs := treeEvents(prev, cur)
		for _, ev := range evs {
			if sw.send(map[string]any{"filesystem": ev}) != nil {
				return nil
			}
		}
		prev = cur
		if idle++; len(evs) > 0 {
			idle = 0
		} else if idle*int(watchEvery/time.Millisecond) >= 30000 {
			idle = 0
			if sw.send(map[string]any{"keepalive": struct{}{}}) != nil {
				return nil
			}
		}
	}
}

// listTree lists dir in the sandbox, and with recursive its
// subdirectories, by path relative to dir; at most maxListed entries.
func listTree(ctx context.Context, sock, dir string, recursive bool) (map[string]agent.FileInfo, error) {
	out := map[string]agent.FileInfo{}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		list, err := agent.List(ctx, sock, dir)
		if err != nil {
			return err
		}
		for _, fi := range list {
			if len(out) >= maxListed {
				return errListed
			}
			name := path.Join(rel, fi.Name)
			out[name] = fi
			if recursive && fi.Type == "dir" {
				if err := walk(path.Join(dir, fi.Name), name); err == errListed {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(dir, "")
}

// fsEvent is a filesystem event of WatchDir.
type fsEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// treeEvents are the events that turn listing prev into cur, by name: a
// new entry is created (and written, when a file with data), a changed
// one written or its mode changed, and then the gone ones removed.
func treeEvents(prev, cur map[string]agent.FileInfo) []fsEvent {
	var evs []fsEvent
	for _, n := range slices.Sorted(maps.Keys(cur)) {
		old, ok := prev[n]
		c := cur[n]
		switch {
		case !ok:
			evs = append(evs, fsEvent{n, "EVENT_TYPE_CREATE"})
			if c.Type == "file" && c.Size > 0 {
				evs = append(evs, fsEvent{n, "EVENT_TYPE_WRITE"})
			}
		case old.Size != c.Size || !old.Modified.Equal(c.Modified):
			evs = append(evs, fsEvent{n, "EVENT_TYPE_WRITE"})
		case old.Mode != c.Mode:
			evs = append(evs, fsEvent{n, "EVENT_TYPE_CHMOD"})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(prev)) {
		if _, ok := cur[n]; !ok {
			evs = append(evs, fsEvent{n, "EVENT_TYPE_REMOVE"})
		}
	}
	return evs
}

// watchEvery is how often WatchDir lists the directory.
const watchEvery = 200 * time.Millisecond
