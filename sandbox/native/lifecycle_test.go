package native_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

func TestExitStatus(t *testing.T) {
	spec := baseSpec(t)
	for _, c := range []struct {
		script string
		code   int
		sig    syscall.Signal
		reason sandbox.Reason
	}{
		{"exit 0", 0, 0, sandbox.ReasonExited},
		{"exit 3", 3, 0, sandbox.ReasonExited},
		{"exit 255", 255, 0, sandbox.ReasonExited},
		{"kill -TERM $$", 143, syscall.SIGTERM, sandbox.ReasonSignaled},
		{"kill -KILL $$", 137, syscall.SIGKILL, sandbox.ReasonSignaled},
		{"kill -SEGV $$", 139, syscall.SIGSEGV, sandbox.ReasonSignaled},
	} {
		res, _, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", c.script}})
		if res.ExitCode != c.code || res.Signal != c.sig || res.Reason != c.reason {
			t.Errorf("%q: got %d %v %s, want %d %v %s", c.script, res.ExitCode, res.Signal, res.Reason, c.code, c.sig, c.reason)
		}
	}
}

func TestExecErrors(t *testing.T) {
	spec := baseSpec(t)
	for _, c := range []struct {
		args []string
		is   error
	}{
		{[]string{"no-such-command-here"}, fs.ErrNotExist},
		{[]string{"/no/such/path"}, fs.ErrNotExist},
		{[]string{"/etc/passwd"}, fs.ErrPermission},
		{[]string{"/etc"}, fs.ErrPermission},
	} {
		_, err := native.Run(t.Context(), spec, &sandbox.Cmd{Args: c.args})
		var ee *sandbox.ExecError
		if !errors.As(err, &ee) || !errors.Is(err, c.is) {
			t.Errorf("%v: got %v, want an ExecError matching %v", c.args, err, c.is)
		}
	}
	_, err := native.Run(t.Context(), spec, &sandbox.Cmd{Args: []string{"true"}, Dir: "/no/such/dir"})
	if err == nil || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("missing workdir: got %v", err)
	}
}

func TestStdio(t *testing.T) {
	spec := baseSpec(t)
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "tr a-z A-Z; echo oops >&2"},
		Stdin: strings.NewReader("hello sandbox\n")})
	if res.ExitCode != 0 || out != "HELLO SANDBOX\n" || errs != "oops\n" {
		t.Errorf("got %d %q %q", res.ExitCode, out, errs)
	}
	// Without stdin the command reads end of file at once.
	res, out, _ = run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "cat; echo done"}})
	if res.ExitCode != 0 || out != "done\n" {
		t.Errorf("nil stdin: got %d %q", res.ExitCode, out)
	}
	// Streams that are not files are copied while the command runs.
	sb, err := native.New(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := sb.Run(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "read x; echo got $x"}, Stdin: inR, Stdout: outW})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		io.WriteString(inW, "42\n")
		inW.Close()
	}()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(outR)
		got <- b
	}()
	_, err = p.Wait()
	outW.Close()
	if b := <-got; err != nil || string(b) != "got 42\n" {
		t.Errorf("pipes: %q %v", b, err)
	}
}

func TestTerminal(t *testing.T) {
	sb, err := native.New(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	p, err := sb.Start(t.Context(), &sandbox.Cmd{TTY: true, Rows: 40, Cols: 132, Args: []string{"sh", "-c",
		"tty; stty size; read line; stty size; echo got $line"}})
	if err != nil {
		t.Fatal(err)
	}
	// Resized once the first size showed: a fixed wait let a slow
	// machine's shell see the new size first.
	var first bytes.Buffer
	for buf := make([]byte, 256); !strings.Contains(first.String(), "40 132"); {
		n, err := p.PTY.Read(buf)
		first.Write(buf[:n])
		if err != nil {
			t.Fatalf("no first size: %q %v", first.String(), err)
		}
	}
	if err := p.Resize(50, 160); err != nil {
		t.Fatal(err)
	}
	io.WriteString(p.PTY, "typed\n")
	out := strings.ReplaceAll(first.String()+readAll(p.PTY), "\r", "")
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	for _, w := range []string{"/dev/pts/0\n", "40 132\n", "50 160\n", "got typed\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("terminal output lacks %q: %q", w, out)
		}
	}
}

func TestSignalForwarding(t *testing.T) {
	sb, err := native.New(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out lockedBuffer
	p, err := sb.Run(t.Context(), &sandbox.Cmd{Stdout: &out, Args: []string{"sh", "-c",
		"trap 'echo term; exit 42' TERM; echo ready; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	// Signalled only once the trap is set: before, the shell dies of it.
	for end := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "ready"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			p.Signal(syscall.SIGKILL)
			p.Wait()
			t.Fatalf("the command did not start: %q", out.String())
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 42 || !strings.Contains(out.String(), "term") {
		t.Errorf("got %+v %v %q", res, err, out.String())
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	spec := baseSpec(t)
	start := time.Now()
	res, _, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 30; :", "pinfold-native-test-marker"}, Timeout: 300 * time.Millisecond})
	if res.ExitCode != sandbox.ExitCodeTimeout || res.Reason != sandbox.ReasonTimeout || time.Since(start) > 10*time.Second {
		t.Errorf("timeout: %+v after %v", res, time.Since(start))
	}
	waitNoLeaks(t, time.Second)

	ctx, cancel := context.WithCancel(t.Context())
	sb, err := native.New(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	p, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 30; :", "pinfold-native-test-marker"}})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err = p.Wait()
	if err != nil || res.Reason != sandbox.ReasonKilled {
		t.Errorf("cancel: %+v %v", res, err)
	}
	waitNoLeaks(t, time.Second)
}

func TestPool(t *testing.T) {
	sb, err := native.New(t.Context(), baseSpec(t), native.WithPool(2))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		var out bytes.Buffer
		p, err := sb.Run(t.Context(), &sandbox.Cmd{Args: []string{"sh", "-c", "echo $$; test -e /tmp/x && echo dirty; touch /tmp/x; echo ok"}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		// Every command gets a fresh instance: pid 2, an empty /tmp.
		if err != nil || res.ExitCode != 0 || out.String() != "2\nok\n" {
			t.Fatalf("run %d: %+v %v %q", i, res, err, out.String())
		}
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(t.Context(), &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("run after close: %v", err)
	}
}

func TestWorkspace(t *testing.T) {
	spec := baseSpec(t)
	os.WriteFile(filepath.Join(spec.Workspace, "in"), []byte("from host"), 0o644)
	sub := filepath.Join(spec.Workspace, "sub")
	os.Mkdir(sub, 0o755)
	res, out, _ := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "pwd; cat in; echo made > out"}})
	if res.ExitCode != 0 || out != spec.Workspace+"\nfrom host" {
		t.Errorf("got %d %q", res.ExitCode, out)
	}
	if b, _ := os.ReadFile(filepath.Join(spec.Workspace, "out")); string(b) != "made\n" {
		t.Errorf("write did not reach the workspace: %q", b)
	}
	res, out, _ = run(t, spec, &sandbox.Cmd{Args: []string{"pwd"}, Dir: sub})
	if out != sub+"\n" {
		t.Errorf("Dir: %q", out)
	}
	ro := spec
	ro.Access = sandbox.AccessReadOnly
	res, _, errs := run(t, ro, &sandbox.Cmd{Args: []string{"sh", "-c", "cat in >/dev/null && echo x > out2"}})
	if res.ExitCode == 0 || !strings.Contains(errs, "Read-only") {
		t.Errorf("read-only workspace was writable: %d %q", res.ExitCode, errs)
	}
	none := spec
	none.Access = sandbox.AccessNone
	res, out, _ = run(t, none, &sandbox.Cmd{Args: []string{"sh", "-c", "pwd; ls " + spec.Workspace}})
	if res.ExitCode == 0 || out != "/\n" {
		t.Errorf("workspace visible with access none: %d %q", res.ExitCode, out)
	}
}

func TestWorkspaceOwnership(t *testing.T) {
	requireRoot(t)
	for _, owner := range []int{0, 1234, 100000} {
		spec := baseSpec(t)
		if err := os.Chown(spec.Workspace, owner, owner); err != nil {
			t.Fatal(err)
		}
		res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "id -u; stat -c %u:%g .; touch made; mkdir dir"}})
		if res.ExitCode != 0 {
			t.Fatalf("owner %d: %d %s %s", owner, res.ExitCode, out, errs)
		}
		// Inside, the invoking user (root here) owns the workspace.
		if out != "0\n0:0\n" {
			t.Errorf("owner %d: inside view %q", owner, out)
		}
		for _, name := range []string{"made", "dir"} {
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(spec.Workspace, name), &st); err != nil {
				t.Fatal(err)
			}
			if int(st.Uid) != owner || int(st.Gid) != owner {
				t.Errorf("owner %d: %s created as %d:%d", owner, name, st.Uid, st.Gid)
			}
		}
	}
}

func TestMounts(t *testing.T) {
	spec := baseSpec(t)
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "f"), []byte("data"), 0o644)
	file := filepath.Join(t.TempDir(), "single")
	os.WriteFile(file, []byte("one file"), 0o644)
	spec.Mounts = append(spec.Mounts,
		sandbox.Mount{Source: data, Target: "/data"},
		sandbox.Mount{Source: data, Target: "/data-ro", ReadOnly: true},
		sandbox.Mount{Source: file, Target: "/etc-extra/single", ReadOnly: true})
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c",
		"cat /data/f; echo w > /data/new; cat /etc-extra/single; echo x > /data-ro/no"}})
	if out != "dataone file" || !strings.Contains(errs, "Read-only") || res.ExitCode == 0 {
		t.Errorf("got %d %q %q", res.ExitCode, out, errs)
	}
	if _, err := os.Stat(filepath.Join(data, "new")); err != nil {
		t.Errorf("rw mount not written: %v", err)
	}
}

func TestWorkspaceInsideSystemDir(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/opt"); err != nil {
		t.Skip("no /opt on this host")
	}
	ws, err := os.MkdirTemp("/opt", "pinfold-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ws)
	spec := baseSpec(t)
	spec.Workspace = ws
	res, out, errs := run(t, spec, &sandbox.Cmd{Args: []string{"sh", "-c", "echo hi > f && cat f && ls /opt | grep -c pinfold-test- ; echo x > /opt/other"}})
	if res.ExitCode == 0 || !strings.HasPrefix(out, "hi\n") || !strings.Contains(errs, "Read-only") {
		t.Errorf("got %d %q %q", res.ExitCode, out, errs)
	}
}

func TestRefusedWorkspaces(t *testing.T) {
	for _, ws := range []string{"/", "/usr", "/etc", "/tmp", "/proc", "/home", "/root"} {
		if _, err := os.Stat(ws); err != nil {
			continue
		}
		_, err := native.New(t.Context(), sandbox.Spec{Workspace: ws})
		if !errors.Is(err, sandbox.ErrWorkspace) {
			t.Errorf("workspace %s: got %v", ws, err)
		}
	}
}

// initsOf lists this process's children that are sandbox inits.
func initsOf(pid int) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && strings.HasPrefix(string(cmd), "pinfold-init") {
			found = append(found, e.Name()+" "+f[0])
		}
	}
	return found
}

func TestFailedNewLeavesNothing(t *testing.T) {
	spec := baseSpec(t)
	spec.Base = sandbox.Base{Kind: sandbox.BaseDir, Path: "/no/such/dir"}
	done := make(chan error, 1)
	go func() {
		_, err := native.New(t.Context(), spec)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("New accepted a missing base")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("New hung on a failed config")
	}
	for start := time.Now(); len(initsOf(os.Getpid())) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("inits left behind: %v", initsOf(os.Getpid()))
		}
	}
}

// TestTerminalStreams runs a command on a terminal through the runtime
// interface: the terminal is fed from Cmd.Stdin and shown on Cmd.Stdout.
func TestTerminalStreams(t *testing.T) {
	var rt sandbox.Runtime = native.NewRuntime()
	sb, err := rt.New(t.Context(), baseSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	inR, inW := io.Pipe()
	defer inW.Close()
	var out bytes.Buffer
	p, err := sb.Run(t.Context(), &sandbox.Cmd{TTY: true, Rows: 30, Cols: 100, Stdin: inR, Stdout: &out,
		Args: []string{"sh", "-c", "stty size; read line; echo got $line"}})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(inW, "typed\n")
	res, err := p.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, w := range []string{"30 100\n", "got typed\n"} {
		if !strings.Contains(got, w) {
			t.Errorf("terminal output lacks %q: %q", w, got)
		}
	}
}
