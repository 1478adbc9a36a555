package container

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/sandbox"
)

// docker's runs (and their network holders) go to the daemon's API over
// its unix socket rather than through `docker run`:
// the client's own start (a 40 MB Go binary, 8 ms before it reads a flag
// on this machine) and its round trips were most of what a run added to
// the daemon's work. The requests are those `docker run --rm` makes
// (create, attach, wait, start), from the same flags: runFlags turns the
// flags pinfold builds into the create request, and refuses any it does
// not know, which then go to the client as before. The API's HTTP is the
// small part of HTTP/1.1 it needs, written here: net/http stays out of
// pinfold (cmd/pinfold/deps_test.go).

// createBody is the body of POST /containers/create: the fields the
// docker API names, as runFlags fills them.
type createBody struct {
	Image        string
	Entrypoint   []string
	Cmd          []string
	Env          []string
	WorkingDir   string `json:",omitempty"`
	User         string `json:",omitempty"`
	Hostname     string `json:",omitempty"`
	Labels       map[string]string
	AttachStdin  bool
	AttachStdout bool
	AttachStderr bool
	OpenStdin    bool
	StdinOnce    bool
	Tty          bool
	HostConfig   hostConfig
}

type hostConfig struct {
	Binds          []string
	Tmpfs          map[string]string
	ReadonlyRootfs bool
	CapDrop        []string
	CapAdd         []string
	SecurityOpt    []string
	NetworkMode    string `json:",omitempty"`
	CgroupParent   string `json:",omitempty"`
	Ulimits        []ulimit
	AutoRemove     bool
}

type ulimit struct {
	Name       string
	Soft, Hard int64
}

// runFlags reads `docker run` flags (those before the image) into a
// create request; ok is false on a flag it does not know, whose run then
// takes the client.
func runFlags(args []string) (name string, b createBody, ok bool) {
	b.Labels = map[string]string{}
	b.HostConfig.Tmpfs = map[string]string{}
	for i := 0; i < len(args); i++ {
		f := args[i]
		switch f {
		case "--read-only":
			b.HostConfig.ReadonlyRootfs = true
			continue
		case "--rm":
			b.HostConfig.AutoRemove = true
			continue
		case "--sig-proxy=false", "--pull=never":
			// the client's concerns: no client forwards signals here,
			// and create never pulls
			continue
		}
		if i+1 >= len(args) {
			return "", b, false
		}
		v := args[i+1]
		i++
		switch f {
		case "--name":
			name = v
		case "--label":
			k, val, _ := strings.Cut(v, "=")
			b.Labels[k] = val
		case "--cap-drop":
			b.HostConfig.CapDrop = append(b.HostConfig.CapDrop, v)
		case "--cap-add":
			b.HostConfig.CapAdd = append(b.HostConfig.CapAdd, v)
		case "--security-opt":
			b.HostConfig.SecurityOpt = append(b.HostConfig.SecurityOpt, v)
		case "--tmpfs":
			dst, opts, _ := strings.Cut(v, ":")
			b.HostConfig.Tmpfs[dst] = opts
		case "--network":
			b.HostConfig.NetworkMode = v
		case "--hostname":
			b.Hostname = v
		case "--user":
			b.User = v
		case "-v":
			b.HostConfig.Binds = append(b.HostConfig.Binds, v)
		case "--entrypoint":
			b.Entrypoint = []string{v}
		case "--cgroup-parent":
			b.HostConfig.CgroupParent = v
		case "-w":
			b.WorkingDir = v
		case "--ulimit":
			n, lim, _ := strings.Cut(v, "=")
			s, h, _ := strings.Cut(lim, ":")
			soft, err1 := strconv.ParseInt(s, 10, 64)
			hard, err2 := strconv.ParseInt(h, 10, 64)
			if err1 != nil || err2 != nil {
				return "", b, false
			}
			b.HostConfig.Ulimits = append(b.HostConfig.Ulimits, ulimit{Name: n, Soft: soft, Hard: hard})
		default:
			return "", b, false
		}
	}
	if name == "" || b.Entrypoint == nil {
		return "", b, false
	}
	b.AttachStdout, b.AttachStderr = true, true
	return name, b, true
}

// requestTimeout bounds a request to the daemon up to its answer's
// headers (and a plain answer's body): a daemon that accepts and never
// answers fails the run rather than hanging it.
const requestTimeout = 60 * time.Second

// daemonSocket is the docker daemon's unix socket (see dialDaemon).
func daemonSocket() (string, error) {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		p, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			return "", fmt.Errorf("DOCKER_HOST %s is not a local unix socket: pinfold binds this machine's paths into containers", h)
		}
		return p, nil
	}
	// The client's context picks another daemon: its runs, the skeleton
	// image's import and `pinfold clean` go there, so must this path's.
	if c := os.Getenv("DOCKER_CONTEXT"); c != "" && c != "default" {
		return "", fmt.Errorf("docker context %s: the client runs it", c)
	}
	if c := currentContext(); c != "" && c != "default" {
		return "", fmt.Errorf("docker context %s: the client runs it", c)
	}
	return "/var/run/docker.sock", nil
}

// currentContext is the client's configured context (currentContext in
// its config.json), "" when none is set; a config that cannot be read or
// parsed names an unknown one, so that the client decides.
func currentContext() string {
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = home + "/.docker"
	}
	f, err := os.Open(dir + "/config.json")
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		return "?"
	}
	defer f.Close()
	var c struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.NewDecoder(io.LimitReader(f, 1<<20)).Decode(&c); err != nil {
		return "?"
	}
	return c.CurrentContext
}

// apiError is the daemon's answer to a request that failed.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return "Error response from daemon: " + e.msg }

// request sends one request on a new connection to the daemon and
// returns the connection, past the response's headers, with the status
// and the body's reader (the raw stream after a 101).
//
// Until its headers are read, a request is bounded by requestTimeout and
// ended by ctx; a plain answer's body by requestTimeout too. A stream
// (an attach, a wait) has no deadline once its headers are in.
func request(ctx context.Context, sock, method, path string, body []byte, upgrade bool) (net.Conn, int, io.Reader, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, 0, nil, &dialError{err}
	}
	c.SetDeadline(time.Now().Add(requestTimeout))
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var h bytes.Buffer
	fmt.Fprintf(&h, "%s %s HTTP/1.1\r\nHost: docker\r\nUser-Agent: pinfold\r\n", method, path)
	if upgrade {
		h.WriteString("Connection: Upgrade\r\nUpgrade: tcp\r\n")
	} else {
		h.WriteString("Connection: close\r\n")
	}
	if body != nil {
		fmt.Fprintf(&h, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	} else {
		h.WriteString("Content-Length: 0\r\n")
	}
	h.WriteString("\r\n")
	h.Write(body)
	if _, err := c.Write(h.Bytes()); err != nil {
		c.Close()
		return nil, 0, nil, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, 0, nil, fmt.Errorf("the docker daemon's answer to %s %s: %w", method, path, err)
	}
	f := strings.Fields(line)
	status := 0
	if len(f) >= 2 {
		status, _ = strconv.Atoi(f[1])
	}
	if status == 0 {
		c.Close()
		return nil, 0, nil, fmt.Errorf("the docker daemon's answer to %s %s: %q", method, path, line)
	}
	length, chunked := int64(-1), false
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, 0, nil, fmt.Errorf("the docker daemon's answer to %s %s: %w", method, path, err)
		}
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-length":
			length, _ = strconv.ParseInt(v, 10, 64)
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	if !stop() {
		c.Close()
		return nil, 0, nil, ctx.Err()
	}
	var br io.Reader = r
	switch {
	case status == 101:
	case chunked:
		br = &chunkReader{r: r}
	case length >= 0:
		br = io.LimitReader(r, length)
	}
	return c, status, br, nil
}

// call sends a request and decodes its JSON answer into out (when not
// nil); a status of 400 or more is an *apiError.
func call(ctx context.Context, sock, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return err
		}
	}
	c, status, r, err := request(ctx, sock, method, path, body, false)
	if err != nil {
		return err
	}
	defer c.Close()
	return answer(status, r, out)
}

// answer reads a response's body: its message when status is an error,
// else its JSON into out.
func answer(status int, r io.Reader, out any) error {
	b, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if status >= 400 {
		var m struct{ Message string }
		if json.Unmarshal(b, &m) != nil || m.Message == "" {
			m.Message = strings.TrimSpace(string(b))
		}
		return &apiError{status: status, msg: m.Message}
	}
	if err != nil {
		return err
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// chunkReader reads HTTP/1.1's chunked transfer encoding.
type chunkReader struct {
	r    *bufio.Reader
	left int64
	done bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		l, err := c.r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(strings.TrimSpace(l), ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad chunk size %q", l)
		}
		if n == 0 {
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		// the chunk's CRLF
		if _, err := c.r.Discard(2); err != nil {
			return n, err
		}
	}
	return n, err
}

// apiRun is a container started through the API: its output being
// copied, and its exit status to come.
type apiRun struct {
	sock   string // the daemon's, for signals and resizes
	id     string
	attach net.Conn
	copied chan error // the output copied (the attach stream's end)
	wait   net.Conn
	waitR  io.Reader
}

// startAPI creates, attaches to, and starts the container of flags with
// image, cmd and env, as `docker run` would, copying its output to
// stdout and stderr. The container's name is in flags. A failure the
// daemon reports is an *apiError; one to reach it is another error.
func startAPI(ctx context.Context, sock string, flags []string, image string, cmd, env []string, tty *[2]uint16, stdin io.Reader, stdout, stderr io.Writer) (*apiRun, error) {
	name, body, ok := runFlags(flags)
	if !ok {
		return nil, errors.New("flags the API path does not take")
	}
	body.Image, body.Cmd, body.Env = image, cmd, env
	body.Tty = tty != nil
	attach := "/attach?stream=1&stdout=1&stderr=1"
	if stdin != nil {
		// As `docker run -i`: the command's stdin closes when ours ends.
		body.AttachStdin, body.OpenStdin, body.StdinOnce = true, true, true
		attach += "&stdin=1"
	}
	var created struct{ Id string }
	if err := call(ctx, sock, "POST", "/containers/create?name="+name, body, &created); err != nil {
		return nil, err
	}
	id := created.Id
	a := &apiRun{sock: sock, copied: make(chan error, 1)}
	fail := func(err error) (*apiRun, error) {
		a.close()
		// The container never started: nothing removes it but this
		// (with its anonymous volumes, as --rm would).
		call(context.Background(), sock, "DELETE", "/containers/"+id+"?force=1&v=1", nil, nil)
		return nil, err
	}
	// The attach and the wait are in place before the start, so that no
	// output is lost and the removal (AutoRemove) cannot come first;
	// both answer with their headers at once.
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, status, r, err := request(ctx, sock, "POST", "/containers/"+id+"/wait?condition=removed", nil, false)
		if err == nil && status >= 400 {
			err = answer(status, r, nil)
			c.Close()
		}
		if err != nil {
			werr = err
			return
		}
		c.SetDeadline(time.Time{}) // the answer comes with the removal
		a.wait, a.waitR = c, r
	}()
	c, status, r, err := request(ctx, sock, "POST", "/containers/"+id+attach, nil, true)
	if err == nil {
		c.SetDeadline(time.Time{}) // the command's output, for its life
		a.attach = c
		if status != 101 && status != 200 {
			err = answer(status, r, nil)
		}
	}
	wg.Wait()
	if err == nil {
		err = werr
	}
	if err != nil {
		return fail(err)
	}
	go func() {
		if tty != nil {
			// A terminal's stream is the terminal's output as it is.
			if stdout == nil {
				stdout = io.Discard
			}
			_, err := io.Copy(stdout, r)
			if errors.Is(err, net.ErrClosed) {
				err = nil
			}
			a.copied <- err
			return
		}
		a.copied <- demux(r, stdout, stderr)
	}()
	if stdin != nil {
		// Written before the start, it waits in the daemon; the
		// half-close is the end of the command's stdin.
		go func() {
			io.Copy(c, stdin)
			if uc, ok := c.(*net.UnixConn); ok {
				uc.CloseWrite()
			}
		}()
	}
	if err := call(ctx, sock, "POST", "/containers/"+id+"/start", nil, nil); err != nil {
		return fail(err)
	}
	a.id = id
	if tty != nil {
		// docker 20.10's API sizes a terminal only once it exists, as its
		// client does (the command's stty prefix covers what runs first).
		a.resize(tty[0], tty[1])
	}
	return a, nil
}

// demux copies docker's multiplexed stream (an 8-byte header before each
// frame: the stream, then the frame's length) to stdout and stderr.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		w := stdout
		if hdr[0] == 2 {
			w = stderr
		}
		for n > 0 {
			m := min(n, len(buf))
			if _, err := io.ReadFull(r, buf[:m]); err != nil {
				return err
			}
			if w != nil {
				w.Write(buf[:m])
			}
			n -= m
		}
	}
}

// finish waits for the output and the container's removal and returns
// its exit status.
func (a *apiRun) finish() (int, error) {
	defer a.close()
	cerr := <-a.copied
	var res struct {
		StatusCode int
		Error      *struct{ Message string }
	}
	err := answer(200, a.waitR, &res)
	switch {
	case err != nil:
		return 0, fmt.Errorf("waiting for the container: %w", err)
	case res.Error != nil && res.Error.Message != "":
		return 0, &apiError{status: 500, msg: res.Error.Message}
	case cerr != nil:
		return 0, fmt.Errorf("the container's output: %w", cerr)
	}
	return res.StatusCode, nil
}

// resize sets the size of the container's terminal.
func (a *apiRun) resize(rows, cols uint16) error {
	return call(context.Background(), a.sock, "POST", fmt.Sprintf("/containers/%s/resize?h=%d&w=%d", a.id, rows, cols), nil, nil)
}

func (a *apiRun) close() {
	if a.attach != nil {
		a.attach.Close()
	}
	if a.wait != nil {
		a.wait.Close()
	}
}

// dialError is a failure to reach the daemon at all: nothing was made.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// viaAPI runs cmd through docker's API when it can (ok): a docker run
// whose flags runFlags takes all of, and a daemon that answers; else the
// client runs it.
// PINFOLD_DOCKER_CLI=1 sends every run to the client.
func (s *Sandbox) viaAPI(ctx context.Context, cmd *sandbox.Cmd, args, env []string, nw *network, cg *cgroup.Group) (sandbox.Process, bool, error) {
	if !s.useAPI() {
		return nil, false, nil
	}
	if len(args) == 0 || args[0] != "run" {
		return nil, false, nil
	}
	flags := args[1:]
	name, _, ok := runFlags(flags)
	if !ok {
		return nil, false, nil
	}
	sock, err := daemonSocket()
	if err != nil {
		return nil, false, nil
	}
	p := &Process{rt: s.rt, name: name, net: nw, mark: imageMark(s.rt.store, s.rt.engine, s.image), cg: cg, done: make(chan struct{}), limits: s.spec.Limits, timeout: cmd.Timeout}
	p.stderr = &execSniffer{w: cmd.Stderr}
	// The command line is the client's, after the image.
	cl := s.commandArgs(cmd)
	cl = cl[slices.Index(cl, s.image)+1:]
	var tty *[2]uint16
	if cmd.TTY {
		rows, cols := cmd.Rows, cmd.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		tty = &[2]uint16{rows, cols}
		p.stderr = nil // a terminal has one stream
	}
	a, err := startAPI(ctx, sock, flags, s.image, cl, env, tty, cmd.Stdin, cmd.Stdout, p.stderr)
	if err != nil {
		var de *dialError
		var ae *apiError
		switch {
		case errors.As(err, &de):
			return nil, false, nil // the client says why
		case errors.As(err, &ae) && ae.status == 404 && strings.HasPrefix(ae.msg, "No such image") && !strings.Contains(ae.msg, "pinfold-skeleton"):
			// An oci: base the daemon lacks: the client pulls it, as
			// `docker run` does (nothing was created).
			return nil, false, nil
		}
		err = p.apiFailed(err)
		p.release()
		return nil, true, err
	}
	p.api, p.tty = a, cmd.TTY
	p.watch(ctx, cmd.Timeout)
	return p, true, nil
}

// apiFailed is the engine's error for a failed request: as the client's
// would read, and a skeleton image gone forgotten (the next run imports
// it again).
func (p *Process) apiFailed(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == 404 && strings.Contains(ae.msg, "pinfold-skeleton") && p.mark != "" {
		os.Remove(p.mark)
		return &engineError{engine: p.rt.engine, detail: err.Error() + " (the next run imports the image again)"}
	}
	return &engineError{engine: p.rt.engine, detail: err.Error()}
}

// ViaAPI reports whether the command runs through docker's API rather
// than the engine's client (for tests and traces).
func (p *Process) ViaAPI() bool { return p.api != nil }

// useAPI says whether this sandbox's docker runs try the API first.
func (s *Sandbox) useAPI() bool {
	return s.rt.engine == DockerName && os.Getenv("PINFOLD_DOCKER_CLI") != "1"
}

// holderViaAPI creates and starts the network holder of flags (`docker
// run -d`'s, without "run -d"), image and cmd through docker's API, and
// returns its process; ok is false when the client is to do it.
func (s *Sandbox) holderViaAPI(n *network, flags []string, image string, cmd []string) (pid int, ok bool, err error) {
	if !s.useAPI() {
		return 0, false, nil
	}
	_, body, fine := runFlags(flags)
	sock, serr := daemonSocket()
	if !fine || serr != nil {
		return 0, false, nil
	}
	body.Image, body.Cmd = image, cmd
	body.AttachStdout, body.AttachStderr = false, false
	var created struct{ Id string }
	if err := call(context.Background(), sock, "POST", "/containers/create?name="+n.holder, body, &created); err != nil {
		var de *dialError
		if errors.As(err, &de) {
			return 0, false, nil
		}
		return 0, true, &engineError{engine: s.rt.engine, detail: "starting the network holder: " + err.Error()}
	}
	n.sock = sock // close removes it from here on
	var st struct{ State struct{ Pid int } }
	err = call(context.Background(), sock, "POST", "/containers/"+created.Id+"/start", nil, nil)
	if err == nil {
		err = call(context.Background(), sock, "GET", "/containers/"+created.Id+"/json", nil, &st)
	}
	if err != nil || st.State.Pid <= 0 {
		return 0, true, &engineError{engine: s.rt.engine, detail: fmt.Sprintf("starting the network holder: %v (pid %d)", err, st.State.Pid)}
	}
	return st.State.Pid, true, nil
}
