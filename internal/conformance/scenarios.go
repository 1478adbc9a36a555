package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pinfold/pinfold/internal/engine"
	"github.com/pinfold/pinfold/internal/nettest"
	"github.com/pinfold/pinfold/internal/plan"
	"github.com/pinfold/pinfold/sandbox"
)

// rw returns the flags with the workspace access most scenarios use: the
// command writes the workspace directly (changeset capture has scenarios
// of its own). A runtime without that access (a remote cluster's pod
// writes a copy) runs them with the changeset access, the next most
// direct.
func (e *Env) rw() plan.Flags {
	f := e.Runtime.Features()
	if slices.Contains(f.Access, sandbox.AccessReadWrite) {
		return plan.Flags{Access: "rw"}
	}
	return plan.Flags{Access: "changeset"}
}

// Scenarios returns every scenario, in the order they run.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "exit-status", Run: exitStatus},
		{Name: "killed-by-signal", Run: killedBySignal},
		{Name: "not-found", Run: notFound},
		{Name: "not-executable", Run: notExecutable},
		{Name: "streaming", Run: streaming},
		{Name: "stdin", Run: stdin},
		{Name: "tty", Needs: func(f *sandbox.Features) bool { return f.TTY }, Run: tty},
		{Name: "signals", Run: signals},
		{Name: "timeout", Needs: func(f *sandbox.Features) bool { return f.Timeout }, Run: timeout},
		{Name: "limit-memory", Needs: func(f *sandbox.Features) bool { return f.Memory }, Run: limitMemory},
		{Name: "limit-pids", Needs: func(f *sandbox.Features) bool { return f.Pids }, Run: limitPids},
		{Name: "env-policy", Run: envPolicy},
		{Name: "root-only-files", Run: rootOnlyFiles},
		{Name: "host-files", Run: hostFiles},
		{Name: "kernel-surfaces", Run: kernelSurfaces},
		{Name: "capabilities", Needs: func(f *sandbox.Features) bool { return f.Capabilities }, Run: capabilities},
		{Name: "workspace-owner", Needs: func(f *sandbox.Features) bool {
			return hasAccess(sandbox.AccessReadWrite)(f) && hasAccess(sandbox.AccessChangeset)(f)
		}, Run: workspaceOwner},
		{Name: "mounts", Needs: writableMounts, Run: mounts},
		{Name: "caches", Needs: writableMounts, Run: caches},
		{Name: "secrets", Needs: func(f *sandbox.Features) bool { return f.Mounts }, Run: secrets},
		{Name: "workspace-read-only", Needs: hasAccess(sandbox.AccessReadOnly), Run: workspaceReadOnly},
		{Name: "network-none", Needs: hasNetwork(sandbox.NetworkNone), Run: networkNone},
		{Name: "network-allow", Needs: hasNetwork(sandbox.NetworkAllow), Run: networkAllow},
		{Name: "publish", Needs: func(f *sandbox.Features) bool { return f.Publish }, Run: publish},
		{Name: "changeset-capture-apply", Needs: hasAccess(sandbox.AccessChangeset), Run: changesetCaptureApply},
		{Name: "cleanup-after-kill", Run: cleanupAfterKill},
	}
}

// writableMounts: the scenario mounts a host directory read-write.
func writableMounts(f *sandbox.Features) bool { return f.WritableMounts }

func exitStatus(e *Env) {
	r := e.Exec(e.rw(), "sh", "-c", "exit 7")
	if r == nil {
		return
	}
	if res := r.Out.Result; res.ExitCode != 7 || res.Reason != sandbox.ReasonExited {
		e.T.Errorf("exit 7: got %d (%s)", res.ExitCode, res.Reason)
	}
	if r = e.Exec(e.rw(), "true"); r.Out.Result.ExitCode != 0 {
		e.T.Errorf("true: got %d", r.Out.Result.ExitCode)
	}
}

func killedBySignal(e *Env) {
	r := e.Exec(e.rw(), "sh", "-c", "kill -TERM $$")
	if r == nil {
		return
	}
	if res := r.Out.Result; res.ExitCode != 128+15 || res.Reason != sandbox.ReasonSignaled || res.Signal != syscall.SIGTERM {
		e.T.Errorf("kill -TERM: got %d (%s, %v), want 143 (signaled, SIGTERM)", res.ExitCode, res.Reason, res.Signal)
	}
}

func notFound(e *Env) {
	err := e.StartErr(e.rw(), "pinfold-no-such-command")
	if !isExecError(err, fs.ErrNotExist) {
		e.T.Errorf("a missing command: got %v, want an ExecError (not found)", err)
	}
	// A command that exits 127 itself is not a missing command.
	r := e.Exec(e.rw(), "sh", "-c", "exit 127")
	if r != nil && r.Out.Result.ExitCode != 127 {
		e.T.Errorf("exit 127: got %d", r.Out.Result.ExitCode)
	}
}

func notExecutable(e *Env) {
	path := filepath.Join(e.Workspace, "script")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		e.T.Fatal(err)
	}
	err := e.StartErr(e.rw(), path)
	if !isExecError(err, fs.ErrPermission) {
		e.T.Errorf("a file without x: got %v, want an ExecError (permission)", err)
	}
}

func streaming(e *Env) {
	out := newLineWatcher("first")
	var errb syncBuffer
	p := e.Plan(e.rw(), "sh", "-c", "echo first; echo oops >&2; sleep 3; echo second")
	r := e.Start(p, engine.Options{Stdout: out, Stderr: &errb})
	if r == nil {
		return
	}
	start := time.Now()
	// The first line arrives while the command still runs.
	if out.wait(e.T, 2500*time.Millisecond) && time.Since(start) > 2500*time.Millisecond {
		e.T.Errorf("output was not streamed")
	}
	res, err := r.Wait()
	if err != nil {
		e.T.Fatal(err)
	}
	if res.Result.ExitCode != 0 || out.String() != "first\nsecond\n" || errb.String() != "oops\n" {
		e.T.Errorf("got %d stdout %q stderr %q", res.Result.ExitCode, out.String(), errb.String())
	}
}

func stdin(e *Env) {
	f := e.rw()
	f.Interactive = true
	r := e.ExecWith(f, engine.Options{Stdin: strings.NewReader("hello\nworld\n")}, "sh", "-c", "cat; echo done")
	if r == nil {
		return
	}
	if r.Stdout != "hello\nworld\ndone\n" {
		e.T.Errorf("stdin: got %q", r.Stdout)
	}
	// Without -i the command reads end of file at once.
	r = e.ExecWith(e.rw(), engine.Options{Stdin: strings.NewReader("ignored\n")}, "sh", "-c", "cat; echo done")
	if r.Stdout != "done\n" {
		e.T.Errorf("stdin without -i: got %q", r.Stdout)
	}
}

func tty(e *Env) {
	f := e.rw()
	f.TTY, f.Interactive = true, true
	inR, inW := io.Pipe()
	defer inW.Close()
	out := newLineWatcher("ready")
	p := e.Plan(f, "sh", "-c", "tty; stty size; echo ready; read line; stty size; echo got $line")
	r := e.Start(p, engine.Options{Stdin: inR, Stdout: out, Rows: 33, Cols: 99})
	if r == nil {
		return
	}
	if out.wait(e.T, 10*time.Second) {
		if err := r.Resize(44, 111); err != nil {
			e.T.Errorf("resize: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // engines pass the size on asynchronously
		io.WriteString(inW, "typed\n")
	}
	res, err := r.Wait()
	if err != nil {
		e.T.Fatal(err)
	}
	got := strings.ReplaceAll(out.String(), "\r", "")
	for _, w := range []string{"/dev/pts/", "33 99\n", "44 111\n", "got typed\n"} {
		if w == "/dev/pts/" && e.Target.TTYUnnamed != "" && strings.HasPrefix(got, "not a tty\n") {
			e.T.Logf("known gap: the terminal has no name: %s", e.Target.TTYUnnamed)
			continue
		}
		if !strings.Contains(got, w) {
			e.T.Errorf("terminal output lacks %q: %q", w, got)
		}
	}
	if res.Result.ExitCode != 0 {
		e.T.Errorf("exit %d", res.Result.ExitCode)
	}
}

func signals(e *Env) {
	out := newLineWatcher("ready")
	p := e.Plan(e.rw(), "sh", "-c", `trap 'echo got TERM; exit 42' TERM; echo ready; while :; do sleep 0.1; done`)
	r := e.Start(p, engine.Options{Stdout: out, Stderr: io.Discard})
	if r == nil {
		return
	}
	if out.wait(e.T, 10*time.Second) {
		if err := r.Signal(syscall.SIGTERM); err != nil {
			e.T.Errorf("signal: %v", err)
		}
	}
	res, err := r.Wait()
	if err != nil {
		e.T.Fatal(err)
	}
	if res.Result.ExitCode != 42 || !strings.Contains(out.String(), "got TERM") {
		e.T.Errorf("SIGTERM: got %d %q, want 42 and the trap's line", res.Result.ExitCode, out.String())
	}
}

func timeout(e *Env) {
	f := e.rw()
	f.Timeout = "1s"
	start := time.Now()
	r := e.Exec(f, "sh", "-c", "sleep 30 & sleep 30")
	if r == nil {
		return
	}
	res := r.Out.Result
	if res.ExitCode != sandbox.ExitCodeTimeout || res.Reason != sandbox.ReasonTimeout || !slices.Contains(res.LimitsHit, sandbox.LimitTimeout) {
		e.T.Errorf("timeout: got %d %s %v", res.ExitCode, res.Reason, res.LimitsHit)
	}
	if d := time.Since(start); d > 15*time.Second {
		e.T.Errorf("the timeout took %s", d)
	}
}

func limitMemory(e *Env) {
	f := e.rw()
	f.Memory = "64m"
	// The caller's directory stays as it was: podman's conmon once wrote
	// an "oom" file in the directory pinfold ran in.
	cwd := e.T.TempDir()
	e.T.Chdir(cwd)
	// tail keeps the whole of its endless "line" in memory.
	r := e.Exec(f, "sh", "-c", "tail /dev/zero")
	if r == nil {
		return
	}
	res := r.Out.Result
	if res.ExitCode == 0 || !slices.Contains(res.LimitsHit, sandbox.LimitMemory) {
		e.T.Errorf("memory: got %d %s %v, want the memory limit hit", res.ExitCode, res.Reason, res.LimitsHit)
	}
	if ents, _ := os.ReadDir(cwd); len(ents) > 0 {
		e.T.Errorf("the run wrote %s in the caller's directory", ents[0].Name())
	}
}

func limitPids(e *Env) {
	f := e.rw()
	f.Pids = "16"
	r := e.Exec(f, "sh", "-c", "for i in $(seq 40); do sleep 2 & done 2>/dev/null; wait; echo done")
	if r == nil {
		return
	}
	if res := r.Out.Result; !slices.Contains(res.LimitsHit, sandbox.LimitPids) {
		e.T.Errorf("pids: got %d %v, want the pids limit hit", res.ExitCode, res.LimitsHit)
	}
}

func envPolicy(e *Env) {
	e.T.Setenv("PF_CONF_PASSED", "passed-value")
	e.T.Setenv("PF_CONF_HIDDEN", "hidden-value")
	e.T.Setenv("PF_CONF_TOKEN", "secret-value")
	e.Config = "env:\n  pass: [\"PF_CONF_PASS*\", \"PF_CONF_TOK*\"]\n  deny: [\"*TOKEN*\"]\n  set:\n    FROM_CONFIG: yes\n"
	f := e.rw()
	f.Env = []string{"FROM_FLAG=flag-value"}
	r := e.Exec(f, "env")
	if r == nil {
		return
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	for k, v := range map[string]string{"PF_CONF_PASSED": "passed-value", "FROM_CONFIG": "yes", "FROM_FLAG": "flag-value", "HOME": "/tmp"} {
		if env[k] != v {
			e.T.Errorf("%s=%q inside, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"PF_CONF_HIDDEN", "PF_CONF_TOKEN"} {
		if _, ok := env[k]; ok {
			e.T.Errorf("%s reached the command", k)
		}
	}
	if strings.Contains(r.Stdout, "secret-value") || strings.Contains(r.Stdout, "hidden-value") {
		e.T.Errorf("a host value leaked: %q", r.Stdout)
	}
}

func mounts(e *Env) {
	ro, rwDir := e.T.TempDir(), e.T.TempDir()
	os.WriteFile(filepath.Join(ro, "in"), []byte("from host\n"), 0o644)
	os.Chmod(ro, 0o755)
	os.Chmod(rwDir, 0o777)
	f := e.rw()
	f.Mounts = []string{ro + ":/data/ro:ro", rwDir + ":/data/rw"}
	r := e.Exec(f, "sh", "-c", "cat /data/ro/in; echo x > /data/ro/new && echo WROTE-RO; echo out > /data/rw/out")
	if r == nil {
		return
	}
	if r.Stdout != "from host\n" {
		e.T.Errorf("read-only mount: got %q", r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		e.T.Errorf("wrote through a read-only mount")
	}
	if b, err := os.ReadFile(filepath.Join(rwDir, "out")); err != nil || string(b) != "out\n" {
		e.T.Errorf("read-write mount: %q %v", b, err)
	}
}

func caches(e *Env) {
	e.Config = "caches:\n  - name: conformance\n    path: /tmp/.cache/conformance\n"
	if r := e.Exec(e.rw(), "sh", "-c", "echo kept > /tmp/.cache/conformance/f"); r == nil {
		return
	} else if r.Out.Result.ExitCode != 0 {
		e.T.Fatalf("writing the cache: %d %s", r.Out.Result.ExitCode, r.Stderr)
	}
	r := e.Exec(e.rw(), "cat", "/tmp/.cache/conformance/f")
	if r.Stdout != "kept\n" {
		e.T.Errorf("the cache did not keep the first run's file: %q %s", r.Stdout, r.Stderr)
	}
}

func secrets(e *Env) {
	dir := e.T.TempDir()
	os.Chmod(dir, 0o755)
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("s3cr3t\n"), 0o644)
	e.Config = "secrets:\n  - name: token\n    file: " + file + "\n    env: TOKEN_FILE\n"
	r := e.Exec(e.rw(), "sh", "-c", `cat "$TOKEN_FILE"; echo x > "$TOKEN_FILE" && echo WROTE`)
	if r == nil {
		return
	}
	if r.Stdout != "s3cr3t\n" {
		e.T.Errorf("secret: got %q", r.Stdout)
	}
	if b, _ := os.ReadFile(file); string(b) != "s3cr3t\n" {
		e.T.Errorf("the secret was written: %q", b)
	}
}

func workspaceReadOnly(e *Env) {
	r := e.Exec(plan.Flags{Access: "ro"}, "sh", "-c", "ls pinfold.yaml; echo x > new && echo WROTE")
	if r == nil {
		return
	}
	if r.Stdout != "pinfold.yaml\n" {
		e.T.Errorf("read-only workspace: got %q", r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "new")); err == nil {
		e.T.Errorf("wrote to a read-only workspace")
	}
}

// netclient runs the test client and returns its answer.
func netclient(e *Env, f plan.Flags, args ...string) (nettest.Answer, *Result) {
	e.T.Helper()
	r := e.Exec(f, append([]string{"/pinfold-test/netclient"}, args...)...)
	if r == nil {
		return nettest.Answer{}, nil
	}
	var a nettest.Answer
	if err := json.Unmarshal([]byte(r.Stdout), &a); err != nil {
		e.T.Fatalf("netclient %v: %v: %q %q", args, err, r.Stdout, r.Stderr)
	}
	return a, r
}

func networkNone(e *Env) {
	env := nettest.NewEnv(e.T)
	if e.Target.Tools == "" {
		// A target that copies mounts (a cluster's pod) tries with the
		// base's nc; its own tests check its network none further.
		r := e.Exec(plan.Flags{Access: e.rw().Access, Network: "none"}, "sh", "-c", "nc -w 3 "+env.Host.Addr+" 7000 </dev/null && echo CONNECTED")
		if r != nil && strings.Contains(r.Stdout, "CONNECTED") {
			e.T.Errorf("network none reached the test host: %q", r.Stdout)
		}
		return
	}
	a, r := netclient(e, plan.Flags{Access: e.rw().Access, Network: "none"}, "tcp", env.Host.Addr+":7000")
	if r == nil {
		return
	}
	if a.Err == "" {
		e.T.Errorf("network none reached the test host: %q", a.Out)
	}
}

// publish serves a port inside and reaches it from the host through a
// published one.
func publish(e *Env) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.T.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := e.Plan(plan.Flags{Access: e.rw().Access, Publish: []string{fmt.Sprintf("%d:8000", port)}}, "/pinfold-test/netclient", "serve", "8000")
	r := e.Start(p, engine.Options{Stdout: io.Discard, Stderr: io.Discard})
	if r == nil {
		return
	}
	defer func() {
		r.Process.Signal(os.Kill)
		r.Wait()
	}()
	if got := nettest.AskPublished(port, 20*time.Second); got != "echo hello\n" {
		e.T.Errorf("through the published port: got %q, want the server's echo", got)
	}
}

func networkAllow(e *Env) {
	env := nettest.NewEnv(e.T)
	// "ping\n" is neither TLS nor HTTP: the name is allowed raw.
	f := plan.Flags{Access: e.rw().Access, Network: "allow", Allow: []string{"tcp:allowed.test"}, DNS: []string{env.DNS}}
	a, r := netclient(e, f, "tcp", "allowed.test:7000")
	if r == nil {
		return
	}
	if a.Err != "" || a.Out != "echo ping" {
		e.T.Errorf("allowed name: got %q %q", a.Out, a.Err)
	}
	a, r = netclient(e, f, "tcp", "other.test:7000")
	if a.Err == "" {
		e.T.Errorf("a name outside the list went through: %q", a.Out)
	}
	if len(r.Out.Result.Violations) == 0 {
		e.T.Errorf("no violation reported for other.test")
	}
	a, _ = netclient(e, f, "tcp", env.Host.Addr+":7000")
	if a.Err == "" {
		e.T.Errorf("a raw address went through: %q", a.Out)
	}
}

func changesetCaptureApply(e *Env) {
	os.WriteFile(filepath.Join(e.Workspace, "kept"), []byte("old\n"), 0o644)
	os.WriteFile(filepath.Join(e.Workspace, "gone"), []byte("bye\n"), 0o644)
	// (Not pinfold.yaml: a changeset that changes the policy needs
	// apply --policy, see TestChangesetPolicyChange.)
	r := e.Exec(plan.Flags{}, "sh", "-c", "echo new > added; echo changed > kept; rm gone")
	if r == nil {
		return
	}
	cs := r.Out.Changeset
	if cs == nil || cs.Empty || cs.Counts.Added != 1 || cs.Counts.Modified != 1 || cs.Counts.Deleted != 1 {
		e.T.Fatalf("changeset: got %+v\n%s%s", cs, r.Stdout, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "added")); err == nil {
		e.T.Errorf("the workspace changed before the apply")
	}
	c, err := e.Engine.OpenChangeset(cs.ID, "")
	if err != nil {
		e.T.Fatal(err)
	}
	unlock, err := engine.Lock(c)
	if err != nil {
		e.T.Fatal(err)
	}
	_, err = e.Engine.Apply(context.Background(), c, nil, false)
	unlock()
	if err != nil {
		e.T.Fatal(err)
	}
	b1, _ := os.ReadFile(filepath.Join(e.Workspace, "added"))
	b2, _ := os.ReadFile(filepath.Join(e.Workspace, "kept"))
	_, err = os.Stat(filepath.Join(e.Workspace, "gone"))
	if string(b1) != "new\n" || string(b2) != "changed\n" || err == nil {
		e.T.Errorf("after apply: added %q kept %q gone %v", b1, b2, err)
	}
}

// cleanupAfterKill kills pinfold with SIGKILL while its command runs:
// pinfold clean must then leave no process, mount or runtime object.
func cleanupAfterKill(e *Env) {
	if e.Target.Pinfold == "" {
		e.T.Fatal("the target has no pinfold binary")
	}
	marker := fmt.Sprintf("pinfold-conformance-%d-%d", os.Getpid(), time.Now().UnixNano())
	os.WriteFile(filepath.Join(e.Workspace, "pinfold.yaml"), []byte("version: 1\n"), 0o644)
	args := []string{"run", "--backend", e.Target.Backend, "--access", e.rw().Access}
	if e.Target.Base != "" {
		args = append(args, "--base", e.Target.Base)
	}
	// The file tells with rw access, the line with changeset access.
	args = append(args, "--", "sh", "-c", "echo started > started; echo started; sleep 60; : "+marker)
	cmd := exec.Command(e.Target.Pinfold, args...)
	cmd.Dir = e.Workspace
	cmd.Env = append(os.Environ(), "PINFOLD_STORE="+e.Engine.Store, "PINFOLD_NO_LAUNCH_CACHE=1")
	// What pinfold started may hold its output open after the kill; the
	// check below looks for it.
	cmd.WaitDelay = time.Second
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(e.Workspace, "started")); err == nil || strings.Contains(out.String(), "started") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			e.T.Fatalf("the command never started: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	clean := exec.Command(e.Target.Pinfold, "clean")
	clean.Env = append(os.Environ(), "PINFOLD_STORE="+e.Engine.Store)
	if b, err := clean.CombinedOutput(); err != nil {
		e.T.Errorf("pinfold clean: %v\n%s", err, b)
	}
	// The sandbox may take a moment to go once its supervisor is gone.
	var left []string
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		left = ProcessesWith(marker)
		if e.Target.Leftovers != nil {
			l, err := e.Target.Leftovers(context.Background())
			if err != nil {
				e.T.Fatal(err)
			}
			left = append(left, l...)
		}
		if len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		e.T.Errorf("left behind after kill -9 and pinfold clean: %v", left)
	}
	if m := mountsUnder(e.Engine.Store); len(m) > 0 {
		e.T.Errorf("mounts left in the store: %v", m)
	}
}

// ProcessesWith lists the processes whose command line (its arguments
// joined by spaces) holds s.
func ProcessesWith(s string) []string {
	var found []string
	EachProcess(func(pid string, args []string) {
		if cmd := strings.Join(args, " "); strings.Contains(cmd, s) {
			found = append(found, "pid "+pid+": "+cmd)
		}
	})
	return found
}

// EachProcess calls f with the pid and arguments of every process it can
// read the command line of.
func EachProcess(f func(pid string, args []string)) {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		if b, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline"); err == nil {
			f(ent.Name(), strings.Split(string(b), "\x00"))
		}
	}
}

// mountsUnder lists the host's mount points under dir.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var found []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			found = append(found, f[4])
		}
	}
	return found
}
