package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// AgentMain runs the session agent inside the sandbox: it listens on
// RunDir's socket and serves until asked to stop, SIGTERM, or idle for
// idle (0: never). It returns the process's exit status.
func AgentMain(args []string) int {
	idle := time.Duration(0)
	if len(args) > 0 {
		if d, err := time.ParseDuration(args[0]); err == nil {
			idle = d
		}
	}
	var stdio *bufio.Reader
	if len(args) > 1 && args[1] == EnvFromStdin {
		// The session's environment, NUL-separated, on stdin (a pod of
		// the kubernetes runtime, whose spec holds none, so that a warm
		// pod made before the session serves it).
		b, err := io.ReadAll(io.LimitReader(os.Stdin, maxEnv))
		if err != nil {
			fmt.Fprintf(os.Stderr, "pinfold agent: reading the environment: %v\n", err)
			return 1
		}
		setEnv(strings.Split(string(b), "\x00"))
	}
	if len(args) > 1 && args[1] == EnvAttach {
		// main's own command in a kubernetes pod: the environment comes
		// in the attach's envelope. A stdin that ends first was never
		// attached to (the runtime started the agent by exec instead):
		// nothing to serve.
		stdio = bufio.NewReaderSize(os.Stdin, 64<<10)
		env, err := ReadEnv(stdio)
		if err != nil {
			return 0
		}
		setEnv(env)
		// Then the workspace's tar, in chunks (none: the end's alone),
		// unpacked into the directory named after EnvAttach.
		dir := ""
		if len(args) > 2 {
			dir = args[2]
		}
		if err := untarChunks(&ChunkReader{R: stdio}, dir); err != nil {
			fmt.Fprintf(os.Stdout, "%s%v\n", AttachError, err)
			fmt.Fprintf(os.Stderr, "pinfold agent: %v\n", err)
			return 1
		}
		if len(args) > 3 && args[3] == AttachLinks {
			// Network none by a netoff container: serve nothing until
			// every link but loopback is down, and say what was seen.
			fmt.Fprintf(os.Stdout, "%s%s\n", LinksLine, waitLinksDown("/sys/class/net", time.Minute))
		}
	}
	// Caught before the socket shows: whoever sees it may signal the
	// agent at once, and a TERM must end the session as stopped.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	sock := filepath.Join(RunDir, sockName)
	os.Remove(sock)
	old := syscall.Umask(0o077) // the socket is the owner's only
	l, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold agent: %v\n", err)
		return 1
	}
	a := &agent{l: l.(*net.UnixListener), done: make(chan int, 1)}
	a.touch()
	go func() { <-sigs; a.finish(ExitStopped) }()
	if idle > 0 {
		go a.reap(idle)
	}
	go a.serve()
	if stdio != nil {
		go stdioBridge(stdio, os.Stdout, sock)
	}
	code := <-a.done
	l.Close()
	os.Remove(sock)
	// How it ended, for a supervisor that handed off to the waiter (it
	// keeps no record of its own): the host reads it in the run directory.
	reason := "stopped"
	if code == ExitIdle {
		reason = "idle"
	}
	writeMarker(filepath.Join(RunDir, ExitMarker), reason)
	return code
}

func setEnv(env []string) {
	os.Clearenv()
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			os.Setenv(k, v)
		}
	}
}

// stdioBridge serves the attach's stream (in, out) as a connection to
// the agent's socket, as a spare bridge does (attach.go's framing): the
// stream is the session's first connection.
func stdioBridge(in *bufio.Reader, out io.Writer, sock string) {
	cw := ChunkWriter{W: out}
	defer cw.Close()
	if _, err := io.WriteString(out, BridgeReady); err != nil {
		return
	}
	if _, err := in.Peek(1); err != nil {
		return // closed unused
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold agent: %v\n", err)
		return
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	go func() {
		io.Copy(uc, in)
		uc.CloseWrite()
	}()
	io.Copy(cw, uc)
}

// untarChunks unpacks the tar r holds (nothing if it is empty) into dir
// with the system's tar, as the runtime's copy by exec does (umask 0:
// the modes as they were on the host).
func untarChunks(r io.Reader, dir string) error {
	first := make([]byte, 64<<10)
	n, err := io.ReadAtLeast(r, first, 1)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the workspace: %w", err)
	}
	if dir == "" {
		return errors.New("a workspace came with no directory to unpack it in")
	}
	cmd := exec.Command("/bin/sh", "-c", `umask 0 && exec tar -x -f - -C "$0"`, dir)
	cmd.Stdin = io.MultiReader(bytes.NewReader(first[:n]), r)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("unpacking the workspace: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// waitLinksDown waits, for at most max, until every link in dir (sysfs's
// class/net) but loopback is down, and returns each link's flags as
// "NAME FLAGS" joined by ";", for the runtime to check.
func waitLinksDown(dir string, max time.Duration) string {
	for end := time.Now().Add(max); ; time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		var list []string
		up := len(ents) == 0
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), "flags"))
			f := strings.TrimSpace(string(b))
			if err != nil {
				f = "unreadable"
			}
			list = append(list, e.Name()+" "+f)
			v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 32)
			if e.Name() != "lo" && (err != nil || v&1 != 0) {
				up = true
			}
		}
		if !up || time.Now().After(end) {
			return strings.Join(list, ";")
		}
	}
}

// waitStatus waits for StatusFile in RunDir and returns the status it
// holds (BridgeWait).
func waitStatus() int {
	p := filepath.Join(RunDir, StatusFile)
	for {
		// The run directory is the session's too: only a regular file
		// counts, read without following a link or blocking on a FIFO.
		if b, err := readStatus(p); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readStatus reads the small regular file at path, never a link, FIFO or
// device the session's code put there.
func readStatus(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b := make([]byte, 32)
	n, err := f.Read(b)
	return b[:n], err
}

// writeMarker replaces whatever the sandbox left at path (a link, a FIFO
// that would block the write) with a new file holding reason.
func writeMarker(path, reason string) {
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold agent: %v\n", err)
		return
	}
	f.WriteString(reason)
	f.Close()
}

type agent struct {
	l      *net.UnixListener
	active atomic.Int64 // connections open
	last   atomic.Int64 // unix nanoseconds of the last activity
	done   chan int
	once   sync.Once
}

func (a *agent) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *agent) finish(code int) {
	a.once.Do(func() { a.done <- code })
}

// reap ends the agent once nothing has been connected for idle.
func (a *agent) reap(idle time.Duration) {
	tick := idle / 10
	if tick < 100*time.Millisecond {
		tick = 100 * time.Millisecond
	}
	if tick > 5*time.Second {
		tick = 5 * time.Second
	}
	// A monotonic clock that stops while the sandbox is frozen: time
	// paused does not count as idle.
	var busy time.Duration
	prev := time.Now()
	for range time.Tick(tick) {
		now := time.Now()
		step := now.Sub(prev)
		prev = now
		if step > 2*tick {
			step = tick // frozen in between: count only one tick
		}
		if a.active.Load() > 0 {
			busy = 0
			continue
		}
		if time.Since(time.Unix(0, a.last.Load())) < tick {
			busy = 0
			continue
		}
		busy += step
		if busy >= idle {
			a.finish(ExitIdle)
			return
		}
	}
}

func (a *agent) serve() {
	for {
		c, err := a.l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		a.active.Add(1)
		a.touch()
		go func() {
			defer func() { a.active.Add(-1); a.touch(); c.Close() }()
			a.handle(c)
		}()
	}
}

func (a *agent) handle(c *net.UnixConn) {
	r := bufio.NewReaderSize(c, 64<<10)
	req, err := readRequest(r)
	if err != nil {
		return
	}
	fw := &frameWriter{w: c}
	switch req.Op {
	case "ping":
		b, _ := json.Marshal(map[string]any{"pid": os.Getpid()})
		fw.frame(FrameOK, b)
	case "stop":
		fw.frame(FrameOK, []byte("{}"))
		a.finish(ExitStopped)
	case "exec":
		a.exec(c, r, fw, req)
	case "read", "write", "stat", "list", "remove":
		a.fileOp(c, r, fw, req)
	case "connect":
		a.connect(c, r, fw, req)
	case "restore":
		a.restore(c, r, fw)
	default:
		b, _ := json.Marshal(Exit{Code: 125, Error: "unknown op " + strconv.Quote(req.Op)})
		fw.frame(FrameExit, b)
	}
}

// exec runs one command for a client and streams it.
func (a *agent) exec(c *net.UnixConn, r *bufio.Reader, fw *frameWriter, req *Request) {
	sendExit := func(e Exit) {
		b, _ := json.Marshal(e)
		fw.frame(FrameExit, b)
	}
	if len(req.Args) == 0 {
		sendExit(Exit{Code: 125, Error: "no command given"})
		return
	}
	env := append(os.Environ(), req.Env...)
	if req.Clearenv {
		env = req.Env
	}
	if req.Dir != "" {
		// Checked first, as a sandbox's init changes directory before it
		// looks for the command: a missing directory is not a missing
		// command (which starting it would say, both being ENOENT).
		if err := checkDir(req.Dir); err != nil {
			sendExit(Exit{Code: 125, Error: "changing to directory " + req.Dir + " in the session: " + err.Error(), BadDir: true})
			return
		}
	}
	cmd := exec.Command(req.Args[0], req.Args[1:]...)
	if filepath.Base(req.Args[0]) == req.Args[0] {
		// Look the name up in the command's PATH, not the agent's.
		cmd.Path = req.Args[0]
		if p, err := lookPath(req.Args[0], env); err == nil {
			cmd.Path = p
		} else {
			sendExit(Exit{Code: 127, Error: err.Error(), NotFound: true})
			return
		}
	}
	cmd.Env = env
	cmd.Dir = req.Dir
	var ptmx *os.File
	var err error
	var stdinW io.WriteCloser
	var outs []*os.File // what the command's output is read from
	if req.TTY {
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		if ptmx, err = pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols}); err == nil {
			if ptmx, err = pollableTerminal(ptmx); err != nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}
		stdinW = ptmx
		outs = []*os.File{ptmx}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var writes []*os.File
		outs, writes, err = outputPipes(cmd)
		if err == nil && req.Stdin {
			stdinW, err = cmd.StdinPipe()
		}
		if err == nil {
			err = cmd.Start()
		}
		// The command has its copies: the end of the pipe is when it and
		// what it started have closed theirs.
		closeAll(writes)
		if err != nil {
			closeAll(outs)
		}
	}
	if err != nil {
		e := Exit{Code: 126, Error: err.Error()}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			e.Code, e.NotFound = 127, true
		case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EISDIR):
			e.NotExecutable = true
		}
		sendExit(e)
		return
	}
	pid, began := cmd.Process.Pid, time.Now()
	fw.frame(FrameStarted, []byte(strconv.Itoa(pid)))
	ended := make(chan struct{})
	// The client's frames: stdin, signals, sizes. A client gone mid-exec
	// hangs the command up, as a closed terminal would.
	go func() {
		var buf []byte
		for {
			t, b, err := readFrame(r, buf)
			if err != nil {
				select {
				case <-ended:
				default:
					syscall.Kill(-pid, syscall.SIGHUP)
					if ptmx == nil {
						syscall.Kill(-pid, syscall.SIGCONT)
					}
				}
				if stdinW != nil && ptmx == nil {
					stdinW.Close()
				}
				return
			}
			buf = b
			switch t {
			case FrameStdin:
				if stdinW != nil {
					stdinW.Write(b)
				}
			case FrameStdinEOF:
				if stdinW != nil {
					if ptmx != nil {
						ptmx.Write([]byte{4}) // ^D
					} else {
						stdinW.Close()
					}
				}
			case FrameSignal:
				if len(b) == 1 {
					syscall.Kill(-pid, syscall.Signal(b[0]))
				}
			case FrameResize:
				if ptmx != nil && len(b) == 4 {
					setSize(ptmx, binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:]))
				}
			}
		}
	}()
	copies := []*outCopy{startCopy(outs[0], stream{fw, FrameStdout})}
	if len(outs) > 1 {
		copies = append(copies, startCopy(outs[1], stream{fw, FrameStderr}))
	}
	err = cmd.Wait()
	close(ended)
	// The exit goes last: after all the command wrote.
	truncated := false
	for _, o := range copies {
		if o.finish() {
			truncated = true
		}
	}
	e := Exit{Truncated: truncated}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = int(ws.Signal())
			e.Code = 128 + e.Signal
		} else {
			e.Code = ee.ExitCode()
		}
	default:
		e.Code, e.Error = 125, err.Error()
	}
	sendExit(e)
	// Let the client read the exit before the connection closes.
	c.CloseWrite()
	// The session's log (pinfold session logs): what ran, not its
	// arguments, which may hold secrets.
	note := ""
	if truncated {
		note = " (output cut off: a process it left running held it open)"
	}
	fmt.Fprintf(os.Stderr, "%s exec %s (pid %d): status %d after %s%s\n", time.Now().UTC().Format(time.RFC3339), req.Args[0], pid, e.Code,
		time.Since(began).Round(time.Millisecond), note)
}

// lookPath finds name in env's PATH.
func lookPath(name string, env []string) (string, error) {
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, fs.ErrNotExist)
}

// checkDir says why dir cannot be a command's working directory: the
// error's reason alone ("no such file or directory"), nil when it can.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	return nil
}

// EnvFromStdin, as the agent's second argument, makes it read its whole
// environment from stdin (NUL-separated) before it serves.
const EnvFromStdin = "env-from-stdin"

// BridgeCommand is the hidden subcommand that joins its stdin and stdout
// to the agent's socket: the kubernetes runtime runs it by exec in the pod
// for every connection to the session's socket on the host.
const BridgeCommand = "__session-bridge"

// BridgeSpare, as the bridge's argument, makes it a spare: opened ahead
// of the connection it will carry, it writes BridgeReady, then waits for
// its first input before it connects to the agent (an idle spare is not
// a client of the agent's, whose idle end it would hold off).
const BridgeSpare = "spare"

// BridgeReady is what a spare bridge writes once it runs.
const BridgeReady = "pinfold-bridge-ready\n"

// BridgeMain copies stdin to the agent's socket and the socket to stdout.
// The end of stdin half-closes the connection, as the end of a client's
// connection would; it returns once the agent closes its side.
func BridgeMain(args []string) int {
	var first []byte
	if len(args) > 0 && args[0] == BridgeWait {
		return waitStatus()
	}
	if len(args) > 0 && args[0] == BridgeSpare {
		os.Stdout.WriteString(BridgeReady)
		b := make([]byte, 64<<10)
		n, err := os.Stdin.Read(b)
		if n == 0 && err != nil {
			return 0 // closed unused
		}
		first = b[:n]
	}
	// The agent may still be starting (the session's first client):
	// its socket is tried for two seconds.
	var c net.Conn
	var err error
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, err = net.Dial("unix", filepath.Join(RunDir, sockName)); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pinfold bridge: %v\n", err)
		return 1
	}
	if _, err := c.Write(first); err != nil {
		return 1
	}
	uc := c.(*net.UnixConn)
	go func() {
		io.Copy(uc, os.Stdin)
		uc.CloseWrite()
	}()
	io.Copy(os.Stdout, uc)
	return 0
}
