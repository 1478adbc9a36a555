package kubehelper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
)

// Container names in the pod.
const (
	mainName = "main" // runs the command (by exec), holds nothing else
	copyName = "copy" // unpacks and packs the copied directories
	netName  = "netoff"
	// stage is where the copy container sees the copied directories.
	stage = "/.pinfold"
)

// holder keeps a container running until the pod is deleted; the command
// is started in it by exec.
var holder = []string{"sleep", "2147483647"}

// session is one run: the request, the cluster, the control socket.
type session struct {
	req  kube.Request
	c    *client
	ctl  *os.File
	enc  *json.Encoder
	encm sync.Mutex
	pod  string
	made []func(context.Context) // deletes, in order
	// sizes feeds the terminal's sizes to the exec stream.
	sizes chan remotecommand.TerminalSize
	trace []kube.Step
	// warm: the pod was claimed from a pool (its agent is in, its links
	// are down); pooling: the pod is being made for a pool.
	warm, pooling bool
}

func (s *session) send(ev kube.Event) {
	s.encm.Lock()
	defer s.encm.Unlock()
	s.enc.Encode(ev)
}

func (s *session) mark(step string) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	s.trace = append(s.trace, kube.Step{Step: "kube: " + step, Mono: ts.Nano()})
}

// run serves one command: fd 3 is the control socket.
func run() int {
	ctl := os.NewFile(3, "control")
	s := &session{ctl: ctl, enc: json.NewEncoder(ctl), sizes: make(chan remotecommand.TerminalSize, 4)}
	// Signals for the command come over the socket; the terminal's own
	// go to pinfold, which forwards them.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGHUP)
	// pinfold killed, its ends of the command's stdout and stderr close:
	// a write to them must fail, not end the helper by SIGPIPE before it
	// removes the pod.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	rd := bufio.NewReader(ctl)
	line, err := kube.ReadLine(rd)
	if err != nil {
		return 1
	}
	if err := json.Unmarshal(line, &s.req); err != nil {
		s.send(kube.Event{Error: "bad request: " + err.Error(), Kind: kube.ErrSpec})
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// pinfold gone (its end of the socket closed) or a TERM: stop, and
	// remove what was made.
	gone := make(chan struct{})
	controls := make(chan kube.Control, 8)
	go func() {
		defer close(gone)
		for {
			line, err := kube.ReadLine(rd)
			if err != nil {
				return
			}
			var c kube.Control
			if json.Unmarshal(line, &c) == nil {
				controls <- c
			}
		}
	}()
	go func() {
		select {
		case <-gone:
		case <-term:
		}
		cancel()
	}()
	s.mark("helper started")
	code := s.serve(ctx, controls)
	// Cleanup gets its own time: ctx may be cancelled already.
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	for i := len(s.made) - 1; i >= 0; i-- {
		s.made[i](cctx)
	}
	return code
}

func (s *session) fail(kind string, err error) int {
	s.send(kube.Event{Error: err.Error(), Kind: kind, Pod: s.pod})
	return 1
}

func (s *session) serve(ctx context.Context, controls <-chan kube.Control) int {
	r := &s.req
	c, err := connect(r.Kubeconfig, r.Namespace)
	if err != nil {
		return s.fail(kube.ErrCluster, err)
	}
	s.c = c
	pod, secret, pol, err := s.objects()
	if err != nil {
		return s.fail(kube.ErrSpec, err)
	}
	core := c.cs.CoreV1()
	if r.Session != nil {
		go s.tellPool(pod)
		if claimed := s.claim(ctx, pod); claimed != "" {
			return s.command(ctx, controls, claimed)
		}
	}
	if secret != nil {
		if _, err := core.Secrets(c.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return s.fail(kube.ErrCluster, fmt.Errorf("creating the run's secret: %w", err))
		}
		s.made = append(s.made, func(ctx context.Context) { core.Secrets(c.ns).Delete(ctx, secret.Name, metav1.DeleteOptions{}) })
	}
	if pol != nil {
		if _, err := c.cs.NetworkingV1().NetworkPolicies(c.ns).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
			return s.fail(kube.ErrCluster, fmt.Errorf("creating the run's network policy: %w", err))
		}
		s.made = append(s.made, func(ctx context.Context) {
			c.cs.NetworkingV1().NetworkPolicies(c.ns).Delete(ctx, pol.Name, metav1.DeleteOptions{})
		})
	}
	created, err := core.Pods(c.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return s.fail(kube.ErrCluster, fmt.Errorf("creating the pod: %w", err))
	}
	s.pod = created.Name
	grace := int64(1)
	s.made = append(s.made, func(ctx context.Context) {
		core.Pods(c.ns).Delete(ctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	})
	s.mark("pod created")
	// The secret and the policy go with the pod, should the helper die
	// before it deletes them (the garbage collector follows owners).
	owner := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]}}`, created.Name, created.UID)
	var wg sync.WaitGroup
	if secret != nil {
		wg.Go(func() {
			core.Secrets(c.ns).Patch(ctx, secret.Name, types.MergePatchType, []byte(owner), metav1.PatchOptions{})
		})
	}
	if pol != nil {
		wg.Go(func() {
			c.cs.NetworkingV1().NetworkPolicies(c.ns).Patch(ctx, pol.Name, types.MergePatchType, []byte(owner), metav1.PatchOptions{})
		})
	}
	err = s.waitRunning(ctx, created)
	wg.Wait()
	if err != nil {
		return s.fail(kube.ErrCluster, err)
	}
	s.mark("pod running")
	return s.command(ctx, controls, "")
}

// command prepares the running pod (its links down, the copies in; a
// claimed pod's links are down and its agent in already) and runs the
// command in it.
func (s *session) command(ctx context.Context, controls <-chan kube.Control, claimed string) int {
	r, c := &s.req, s.c
	core := c.cs.CoreV1()
	// The links' check and the copy are execs in different containers:
	// they run side by side.
	var linksErr error
	var links sync.WaitGroup
	// A failed copy ends the links' wait (which retries for a minute).
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	if r.NetworkNone && claimed == "" {
		links.Go(func() { linksErr = s.linksDown(lctx) })
	}
	if dirs := s.copyDirs(); len(dirs) > 0 {
		if err := s.copyIn(ctx, dirs); err != nil {
			lcancel()
			links.Wait()
			return s.fail(kube.ErrCluster, err)
		}
		s.mark("copied in")
	}
	links.Wait()
	if linksErr != nil {
		return s.fail(kube.ErrCluster, linksErr)
	}
	s.send(kube.Event{Started: true, Pod: s.pod})

	// The command.
	var timedOut bool
	var tmu sync.Mutex
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if r.TimeoutMS > 0 {
		t := time.AfterFunc(time.Duration(r.TimeoutMS)*time.Millisecond, func() {
			tmu.Lock()
			timedOut = true
			tmu.Unlock()
			zero := int64(0)
			core.Pods(c.ns).Delete(context.Background(), s.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			stop()
		})
		defer t.Stop()
	}
	go func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case ctl := <-controls:
				if ctl.Signal != 0 {
					go s.exec(runCtx, mainName, []string{"kill", "-" + strconv.Itoa(ctl.Signal), "-1"}, nil, io.Discard, io.Discard, false)
				}
				if ctl.Rows > 0 && ctl.Cols > 0 {
					select {
					case s.sizes <- remotecommand.TerminalSize{Height: ctl.Rows, Width: ctl.Cols}:
					default:
					}
				}
			}
		}
	}()
	if r.TTY && r.Rows > 0 && r.Cols > 0 {
		s.sizes <- remotecommand.TerminalSize{Height: r.Rows, Width: r.Cols}
	}
	var stdin io.Reader
	if r.Stdin || r.TTY {
		stdin = os.Stdin
	}
	var stderr io.Writer = os.Stderr
	if r.TTY {
		stderr = nil
	}
	args := r.Args
	if r.TTY && r.Rows > 0 && r.Cols > 0 {
		// The runtime starts the process before the API server's resize
		// reaches its terminal, which then reads 0x0 at first: the size is
		// set before the command, as docker's runtime does it.
		args = append([]string{"/bin/sh", "-c", fmt.Sprintf(`stty rows %d cols %d 2>/dev/null; exec "$@"`, r.Rows, r.Cols), "sh"}, args...)
	}
	if r.Session != nil {
		// The agent: pinfold's binary copied in, its environment on its
		// stdin, and this machine's socket joined to its own.
		args = append([]string{kube.AgentDir + "/" + agentFile}, r.Args[1:]...)
		args = append(args, agent.EnvFromStdin)
		if r.WorkspaceParent && r.Dir != "" {
			// An exec starts in the pod's directory (the workspace's
			// parent): the agent, whose directory its commands inherit,
			// starts in the session's.
			args = append([]string{"/bin/sh", "-c", `cd "$0" && exec "$@"`, r.Dir}, args...)
		}
		stdin = strings.NewReader(strings.Join(r.Session.Env, "\x00"))
		stopBridge, err := s.bridge(runCtx, r.Session.Sock)
		if err != nil {
			return s.fail(kube.ErrCluster, err)
		}
		defer stopBridge()
	}
	code, err := s.exec(runCtx, mainName, args, stdin, os.Stdout, stderr, r.TTY)
	s.mark("command ended")
	tmu.Lock()
	to := timedOut
	tmu.Unlock()
	if to {
		s.send(kube.Event{Exit: &kube.Exit{Code: 124, TimedOut: true}, Trace: s.trace})
		return 0
	}
	if ctx.Err() != nil {
		return 1 // pinfold is gone
	}
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "executable file not found") || strings.Contains(msg, "no such file or directory"):
			return s.fail(kube.ErrNotFound, err)
		case strings.Contains(msg, "permission denied"):
			return s.fail(kube.ErrPermission, err)
		}
		return s.fail(kube.ErrCluster, fmt.Errorf("running the command in pod %s: %w", s.pod, err))
	}
	exit := &kube.Exit{Code: code}
	if code == 128+9 && r.Memory > 0 {
		exit.OOM = s.oomKilled(ctx)
	}
	if r.Access == "changeset" && r.Workspace != "" {
		n, err := s.copyOut(ctx)
		if err != nil {
			return s.fail(kube.ErrCluster, fmt.Errorf("bringing the workspace's writes back: %w", err))
		}
		exit.Changes = n
		s.mark("copied out")
	}
	s.send(kube.Event{Exit: exit, Trace: s.trace})
	return 0
}

// waitRunning waits for the pod's containers to run, and fails fast on
// what will not get better (an image that cannot be had, a failed init).
func (s *session) waitRunning(ctx context.Context, pod *corev1.Pod) error {
	d := 120 * time.Second
	if s.req.StartTimeoutMS > 0 {
		d = time.Duration(s.req.StartTimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, err := s.c.cs.CoreV1().Pods(s.c.ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(), ResourceVersion: pod.ResourceVersion})
	if err != nil {
		return fmt.Errorf("watching pod %s: %w", pod.Name, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("pod %s did not start within %s (kubectl describe pod %s -n %s says why)", pod.Name, d, pod.Name, s.c.ns)
			}
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch of pod %s ended", pod.Name)
			}
			if ev.Type == watch.Deleted {
				return fmt.Errorf("pod %s was deleted before it ran", pod.Name)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if done, err := podReady(p); done || err != nil {
				return err
			}
		}
	}
}

// linksDown waits until main sees every link but loopback down (the
// netoff container's work), so that the command never has a network.
func (s *session) linksDown(ctx context.Context) error {
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var out, errb strings.Builder
		code, err := s.exec(ctx, mainName, []string{"sh", "-c", `for l in /sys/class/net/*; do echo "${l##*/} $(cat "$l/flags")"; done`}, nil, &out, &errb, false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil || code != 0 {
			last = fmt.Sprintf("%v %d %s", err, code, errb.String())
			continue
		}
		up := false
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			name, flags, ok := strings.Cut(l, " ")
			v, perr := strconv.ParseUint(strings.TrimPrefix(flags, "0x"), 16, 32)
			if !ok || perr != nil {
				up, last = true, "unreadable link flags: "+l
				break
			}
			if name != "lo" && v&1 != 0 {
				up, last = true, "link "+name+" is up"
			}
		}
		if !up {
			return nil
		}
		// A failed netoff container ends the wait.
		if p, err := s.c.cs.CoreV1().Pods(s.c.ns).Get(ctx, s.pod, metav1.GetOptions{}); err == nil {
			if _, err := podReady(p); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("pod %s: its links are not down after 60 s (%s): network none cannot be given", s.pod, last)
}

// podReady reports whether every container of p runs, or an error when
// it never will.
func podReady(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s ended before the command ran (%s): %s", p.Name, p.Status.Phase, statusDetail(p))
	}
	for _, st := range p.Status.InitContainerStatuses {
		if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
			return false, fmt.Errorf("pod %s: init container %s failed (%d %s): %s", p.Name, st.Name, t.ExitCode, t.Reason, t.Message)
		}
		if err := waitingError(p, st); err != nil {
			return false, err
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		for _, st := range p.Status.ContainerStatuses {
			if err := waitingError(p, st); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	for _, st := range p.Status.ContainerStatuses {
		if err := waitingError(p, st); err != nil {
			return false, err
		}
		if st.Name == netName {
			// It exits once it has done its work; linksDown checks that.
			if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
				return false, fmt.Errorf("pod %s: container %s, which takes the links down, failed (%d %s): %s", p.Name, st.Name, t.ExitCode, t.Reason, t.Message)
			}
			continue
		}
		if st.State.Running == nil {
			return false, nil
		}
	}
	return len(p.Status.ContainerStatuses) > 0, nil
}

func waitingError(p *corev1.Pod, st corev1.ContainerStatus) error {
	w := st.State.Waiting
	if w == nil {
		return nil
	}
	switch w.Reason {
	case "ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerError", "CreateContainerConfigError", "RunContainerError":
		return fmt.Errorf("pod %s: container %s cannot start: %s: %s", p.Name, st.Name, w.Reason, w.Message)
	}
	return nil
}

func statusDetail(p *corev1.Pod) string {
	var parts []string
	for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if t := st.State.Terminated; t != nil {
			parts = append(parts, fmt.Sprintf("%s exited %d %s %s", st.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		}
	}
	if len(parts) == 0 {
		return p.Status.Reason + " " + p.Status.Message
	}
	return strings.Join(parts, "; ")
}

// exec runs args in a container of the pod through the API server and
// returns its exit status.
func (s *session) exec(ctx context.Context, container string, args []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error) {
	req := s.c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.c.ns).Name(s.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: args, Stdin: stdin != nil, Stdout: stdout != nil,
			Stderr: stderr != nil && !tty, TTY: tty}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(s.c.cfg, "POST", req.URL().String())
	if err != nil {
		return 0, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(s.c.cfg, "POST", req.URL())
	if err != nil {
		return 0, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Tty: tty}
	if !tty {
		opts.Stderr = stderr
	} else {
		opts.TerminalSizeQueue = sizeQueue{ctx: ctx, c: s.sizes}
	}
	err = ex.StreamWithContext(ctx, opts)
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code, nil
	}
	if err != nil {
		return 0, err
	}
	return 0, nil
}

type sizeQueue struct {
	ctx context.Context
	c   chan remotecommand.TerminalSize
}

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case <-q.ctx.Done():
		return nil
	case sz := <-q.c:
		return &sz
	}
}

// oomKilled asks the main container's memory cgroup whether the kernel
// killed for memory (cgroup v1 memory.oom_control, v2 memory.events).
func (s *session) oomKilled(ctx context.Context) bool {
	var out strings.Builder
	s.exec(ctx, mainName, []string{"cat", "/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"}, nil, &out, io.Discard, false)
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" && f[1] != "0" {
			return true
		}
	}
	return false
}

// wsStage is the workspace's copy under the copy container's stage: its
// volume, or with WorkspaceParent the subdirectory of its name.
func (s *session) wsStage() string {
	if s.req.WorkspaceParent {
		return "ws/" + path.Base(s.req.Workspace)
	}
	return "ws"
}

// copyDirs lists the host directories the pod gets as copies (and a
// session's agent, unless a warm pod has it already).
func (s *session) copyDirs() []kube.Dir {
	var dirs []kube.Dir
	if s.req.Session != nil && !s.warm {
		dirs = append(dirs, kube.Dir{Src: s.req.Session.Agent, Name: "agent", FileName: agentFile})
	}
	if s.pooling {
		return dirs // a warm pod gets its session's files when claimed
	}
	if s.req.Workspace != "" && s.req.Access != "none" {
		dirs = append(dirs, kube.Dir{Src: s.req.Workspace, Name: s.wsStage(), Root: s.req.WorkspaceParent})
	}
	for i, m := range s.req.Mounts {
		if !m.File {
			dirs = append(dirs, kube.Dir{Src: m.Source, Name: "m" + strconv.Itoa(i)})
		}
	}
	return dirs
}

// copyIn unpacks the directories into the pod's volumes.
func (s *session) copyIn(ctx context.Context, dirs []kube.Dir) error {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		// Buffered: the exec stream sends each write as a frame of its own.
		bw := bufio.NewWriterSize(pw, 1<<20)
		err := kube.WriteTar(bw, dirs)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		werr <- err
	}()
	var errb strings.Builder
	// umask 0: the files get their modes as they are here (busybox's
	// tar applies the umask when it is not root).
	code, err := s.exec(ctx, copyName, []string{"sh", "-c", `umask 0 && exec tar -x -f - -C "$0"`, stage}, pr, io.Discard, &errb, false)
	pr.CloseWithError(io.ErrClosedPipe)
	if e := <-werr; e != nil && !errors.Is(e, io.ErrClosedPipe) {
		return fmt.Errorf("copying into the pod: %w", e)
	}
	if err != nil {
		return fmt.Errorf("copying into the pod: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("copying into the pod: tar exited %d: %s", code, strings.TrimSpace(errb.String()))
	}
	return nil
}

// copyOut packs the pod's workspace and turns what differs from the
// host's into the changeset's upper directory.
func (s *session) copyOut(ctx context.Context) (int, error) {
	pr, pw := io.Pipe()
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := kube.ToUpper(pr, s.req.Workspace, s.req.Upper)
		// Drain what is left so that the stream ends.
		io.Copy(io.Discard, pr)
		done <- res{n, err}
	}()
	var errb strings.Builder
	code, err := s.exec(ctx, copyName, []string{"tar", "-c", "-f", "-", "-C", stage + "/" + s.wsStage(), "."}, nil, pw, &errb, false)
	pw.CloseWithError(err)
	r := <-done
	switch {
	case err != nil:
		return r.n, err
	case code != 0:
		return r.n, fmt.Errorf("tar in the pod exited %d: %s", code, strings.TrimSpace(errb.String()))
	}
	return r.n, r.err
}

// objects builds the run's pod, and the secret (environment values and
// secret files) and network policy it needs.
func (s *session) objects() (*corev1.Pod, *corev1.Secret, *networkingv1.NetworkPolicy, error) {
	r := &s.req
	if r.NetworkNone == r.NetworkAllow {
		// Either is a limit; a request without one would get the
		// cluster's whole network.
		return nil, nil, nil, errors.New("the request names no network mode (none or allow)")
	}
	labels := map[string]string{kube.LabelOwner: r.Owner, kube.LabelHost: labelValue(r.Host), kube.LabelID: r.ID,
		"app.kubernetes.io/managed-by": "pinfold"}
	name := "pinfold-" + r.ID
	f, t := false, true
	uid, gid := r.UID, r.GID
	pull := corev1.PullPolicy(r.PullPolicy)
	restricted := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{
			RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &t,
			AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Privileged: &f,
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Data: map[string][]byte{}}
	tmp := resource.NewQuantity(r.TmpSize, resource.BinarySI)
	vols := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}}}
	mainMounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	var copyMounts []corev1.VolumeMount
	if r.Workspace != "" && r.Access != "none" {
		vols = append(vols, corev1.Volume{Name: "ws", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		at := r.Workspace
		if r.WorkspaceParent {
			at = path.Dir(r.Workspace)
		}
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: "ws", MountPath: at, ReadOnly: r.Access == "ro"})
		copyMounts = append(copyMounts, corev1.VolumeMount{Name: "ws", MountPath: stage + "/ws"})
	}
	var secretItems []corev1.KeyToPath
	for i, m := range r.Mounts {
		v := "m" + strconv.Itoa(i)
		if m.File {
			if !m.ReadOnly {
				return nil, nil, nil, fmt.Errorf("mount %s: a file is carried in a Secret, which is read-only", m.Target)
			}
			b, err := os.ReadFile(m.Source)
			if err != nil {
				return nil, nil, nil, err
			}
			secret.Data["f"+strconv.Itoa(i)] = b
			secretItems = append(secretItems, corev1.KeyToPath{Key: "f" + strconv.Itoa(i), Path: "f" + strconv.Itoa(i)})
			mainMounts = append(mainMounts, corev1.VolumeMount{Name: "files", MountPath: m.Target, SubPath: "f" + strconv.Itoa(i), ReadOnly: true})
			continue
		}
		if !m.ReadOnly {
			return nil, nil, nil, fmt.Errorf("mount %s: only read-only mounts are copied into a pod", m.Target)
		}
		vols = append(vols, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: v, MountPath: m.Target, ReadOnly: true})
		copyMounts = append(copyMounts, corev1.VolumeMount{Name: v, MountPath: stage + "/" + v})
	}
	if r.Session != nil {
		// A session's pod: pinfold's binary (copied in, read-only in
		// main), the agent's run directory and the session's home.
		for _, v := range []string{"agent", "run", "home"} {
			vols = append(vols, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
		mainMounts = append(mainMounts, corev1.VolumeMount{Name: "agent", MountPath: kube.AgentDir, ReadOnly: true},
			corev1.VolumeMount{Name: "run", MountPath: kube.SessionRun}, corev1.VolumeMount{Name: "home", MountPath: kube.SessionHome})
		copyMounts = append(copyMounts, corev1.VolumeMount{Name: "agent", MountPath: stage + "/agent"})
	}
	if len(secretItems) > 0 {
		mode := int32(0o444)
		vols = append(vols, corev1.Volume{Name: "files", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: name, Items: secretItems, DefaultMode: &mode}}})
	}
	// The environment's values are the secret's, not the pod's: whoever
	// may read pods does not read them.
	var env []corev1.EnvVar
	for i, kv := range r.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		key := "e" + strconv.Itoa(i)
		secret.Data[key] = []byte(v)
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}})
	}
	dir := r.Dir
	if dir == "" {
		dir = "/"
	}
	if r.WorkspaceParent && r.Session != nil {
		// The agent gives each command its directory; the pod's own is
		// the same for all the parent's workspaces.
		dir = path.Dir(r.Workspace)
	}
	main := corev1.Container{Name: mainName, Image: r.Image, ImagePullPolicy: pull, Command: holder, Env: env, WorkingDir: dir,
		VolumeMounts: mainMounts, SecurityContext: restricted(), Stdin: false, TTY: false}
	if r.Memory > 0 || r.CPUs > 0 {
		main.Resources.Limits = corev1.ResourceList{}
		if r.Memory > 0 {
			main.Resources.Limits[corev1.ResourceMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
		}
		if r.CPUs > 0 {
			main.Resources.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(r.CPUs*1000+0.5), resource.DecimalSI)
		}
	}
	containers := []corev1.Container{main}
	if len(copyMounts) > 0 {
		containers = append(containers, corev1.Container{Name: copyName, Image: r.Image, ImagePullPolicy: pull, Command: holder,
			WorkingDir: "/", VolumeMounts: copyMounts, SecurityContext: restricted(),
			// tar needs little, but the page cache of what it writes is
			// charged to it too: room, without asking the scheduler for it.
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")},
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}})
	}
	var pol *networkingv1.NetworkPolicy
	if r.NetworkNone {
		// Network none does not depend on the cluster's network plugin
		// enforcing policies: a container with CAP_NET_ADMIN alone takes
		// every link but loopback down and exits, and the command is
		// started only once main sees them down (linksDown); no container
		// that stays holds a capability to bring one up. (An init
		// container would do the same, but the kubelet notices its end
		// only at its next relist, up to a second later.) The deny-all
		// policy is kept too, for the plugins that enforce it.
		root, nonRoot := int64(0), false
		containers = append(containers, corev1.Container{Name: netName, Image: r.Image, ImagePullPolicy: pull,
			Command: []string{"sh", "-c", `set -e; for l in $(ls /sys/class/net); do [ "$l" = lo ] || ip link set "$l" down; done; ! ip -o link show up | grep -v ': lo:'`},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: &nonRoot, AllowPrivilegeEscalation: &f,
				ReadOnlyRootFilesystem: &t, Privileged: &f,
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}})
		pol = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelID: r.ID}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
	}
	var aliases []corev1.HostAlias
	var dnsPolicy corev1.DNSPolicy
	var dnsConfig *corev1.PodDNSConfig
	if r.NetworkAllow {
		// Network allow: the policy lets the pod reach the allowed
		// addresses alone; their names are in its /etc/hosts, and its
		// resolver is a loopback address where nothing answers.
		var to []networkingv1.NetworkPolicyPeer
		for _, b := range r.Egress {
			to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: b.CIDR, Except: b.Except}})
		}
		spec := networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelID: r.ID}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}
		if len(to) > 0 {
			spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: to}}
		}
		pol = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: spec}
		for _, h := range r.Hosts {
			for _, a := range h.Addrs {
				aliases = append(aliases, corev1.HostAlias{IP: a, Hostnames: []string{h.Name}})
			}
		}
		dnsPolicy = corev1.DNSNone
		dnsConfig = &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}}
	}
	term := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: s.serverPod()},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			TerminationGracePeriodSeconds: &term,
			Hostname:                      r.Hostname,
			HostAliases:                   aliases,
			DNSPolicy:                     dnsPolicy,
			DNSConfig:                     dnsConfig,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: containers,
			Volumes:    vols,
		},
	}
	if r.TimeoutMS > 0 {
		// The cluster's own end for the pod, should the helper be killed.
		d := (r.TimeoutMS+999)/1000 + 300
		pod.Spec.ActiveDeadlineSeconds = &d
	}
	if len(secret.Data) == 0 {
		secret = nil
	}
	return pod, secret, pol, nil
}

// serverPod is the owner reference of pinfold's own pod, when pinfold
// runs in one (PINFOLD_KUBE_OWNER_POD, _UID and _NAMESPACE, from the
// downward API: deploy/kubernetes/serve.yaml) in the namespace of the
// pods it makes: they are then deleted by the garbage collector with it,
// however it ended. In another namespace an owner reference would read as
// a missing owner (and the pod be deleted at once), so there is none.
func (s *session) serverPod() []metav1.OwnerReference {
	name, uid, ns := os.Getenv("PINFOLD_KUBE_OWNER_POD"), os.Getenv("PINFOLD_KUBE_OWNER_UID"), os.Getenv("PINFOLD_KUBE_OWNER_NAMESPACE")
	if name == "" || uid == "" || s.c == nil || ns != s.c.ns {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID(uid)}}
}
