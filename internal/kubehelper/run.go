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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
)

// Container names in the pod.
const (
	mainName = "main" // runs the command (by exec); a session's runs the agent itself (attach)
	copyName = "copy" // unpacks and packs the copied directories
	netName  = "netoff"
	// stage is where the copy container sees the copied directories.
	stage = "/.pinfold"
)

// holder keeps a container running until the pod is deleted; the command
// is started in it by exec.
var holder = []string{"sleep", "2147483647"}

// result is how a command's exec ended.
type result struct {
	code int
	err  error
}

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
	tmu   sync.Mutex
	// starting follows a new pod's start (nil: a claimed pod, which runs).
	starting *podStart
	// spares are execs of the agent's bridge opened ahead of the
	// connections that will need them (a session's).
	spares chan *spare
	// warm: the pod was claimed from a pool (its agent is in, its links
	// are down); pooling: the pod is being made for a pool.
	warm, pooling bool
	// delivered: the pod gets its agent and workspace through its volumes
	// (deliver), nothing is copied by exec before the command.
	delivered bool
	// spareUp is closed once the bridge's first spare is ready.
	spareUp   chan struct{}
	spareOnce sync.Once
	// took asks the bridge for one more spare.
	took chan struct{}
	// attaching: main runs the agent, and the session's first connection
	// is an attach to it (deliver, openAttach); mainAgent: main runs the
	// agent, waiting for an attach (warmAgent), which a claimed pod's
	// session makes, and that carries its workspace (wsByAttach).
	attaching, mainAgent, wsByAttach bool
	// filesIn is closed once the agent's files are in the pod (after a
	// copy by exec, if any).
	filesIn chan struct{}
}

func (s *session) send(ev kube.Event) {
	s.encm.Lock()
	defer s.encm.Unlock()
	s.enc.Encode(ev)
}

func (s *session) mark(step string) {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	s.tmu.Lock()
	s.trace = append(s.trace, kube.Step{Step: "kube: " + step, Mono: ts.Nano()})
	s.tmu.Unlock()
	// PINFOLD_KUBE_TRACE_FILE: each step, on the wall clock, appended to
	// the file, for lining a start up with the kubelet's and containerd's
	// logs (a session's steps reach pinfold only when it ends).
	if f := os.Getenv("PINFOLD_KUBE_TRACE_FILE"); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			fmt.Fprintf(fh, "%d %s %s\n", time.Now().UnixNano(), s.req.ID, step)
			fh.Close()
		}
	}
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
			if s.mainAgent {
				// The claimed pod's agent waits for the attach, which
				// brings the workspace too: no exec before it is ready.
				s.attaching, s.wsByAttach = true, true
			}
			return s.command(ctx, controls, claimed)
		}
	}
	var wsMap *corev1.ConfigMap
	if s.deliverable() {
		m, err := s.deliver(ctx, pod)
		if err != nil {
			s.mark(deliveryNote(err))
		} else if m != nil {
			wsMap = m
			s.made = append(s.made, func(ctx context.Context) { core.ConfigMaps(c.ns).Delete(ctx, m.Name, metav1.DeleteOptions{}) })
		}
	}
	if s.mainAgent && !s.delivered {
		// main runs the agent once the copy has put it in (a pool's kind
		// of pod, started cold with its files copied by exec): the first
		// connection is an attach to it all the same.
		s.attaching = true
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
	if wsMap != nil {
		wg.Go(func() {
			core.ConfigMaps(c.ns).Patch(ctx, wsMap.Name, types.MergePatchType, []byte(owner), metav1.PatchOptions{})
		})
	}
	if pol != nil {
		wg.Go(func() {
			c.cs.NetworkingV1().NetworkPolicies(c.ns).Patch(ctx, pol.Name, types.MergePatchType, []byte(owner), metav1.PatchOptions{})
		})
	}
	// The pod's containers take execs before the kubelet reports them
	// running, which it does on its next relist, up to a second later:
	// the copy, the links' check and the command are tried at once, and
	// the watch ends them should the pod never run.
	s.starting = s.watchStart(ctx, created)
	wg.Wait()
	return s.command(ctx, controls, "")
}

// command prepares the running pod (its links down, the copies in; a
// claimed pod's links are down and its agent in already) and runs the
// command in it.
func (s *session) command(ctx context.Context, controls <-chan kube.Control, claimed string) int {
	r, c := &s.req, s.c
	core := c.cs.CoreV1()
	// The session's socket and its spare execs are opened while the
	// workspace is copied in (a connection waits in the bridge for the
	// agent); a cold pod's spare waits in the pod for the agent's binary.
	var stopBridge func()
	if r.Session != nil {
		var err error
		if stopBridge, err = s.bridge(ctx, r.Session.Sock, mainName); err != nil {
			return s.fail(kube.ErrCluster, err)
		}
		defer stopBridge()
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
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
		args = append([]string{s.agentExe()}, r.Args[1:]...)
		args = append(args, agent.EnvFromStdin)
		if r.WorkspaceParent && r.Dir != "" {
			// An exec starts in the pod's directory (the workspace's
			// parent): the agent, whose directory its commands inherit,
			// starts in the session's.
			args = append([]string{"/bin/sh", "-c", `cd "$0" && exec "$@"`, r.Dir}, args...)
		} else if !s.agentIn() {
			args = awaitAgent(args)
		}
		stdin = strings.NewReader(strings.Join(r.Session.Env, "\x00"))
	}
	runCmd := func() (int, error) {
		var code int
		err := s.whenStarted(runCtx, func() error {
			var err error
			code, err = s.exec(runCtx, mainName, args, stdin, os.Stdout, stderr, r.TTY)
			return err
		})
		return code, err
	}
	// A session's agent starts while the workspace is copied in (a cold
	// pod's once its binary is in, awaitAgent): pinfold reaches it only
	// once told the command started, after the copy. (A tenant's agent
	// starts in the workspace's directory, which the copy makes.)
	var agentRes chan result
	s.filesIn = make(chan struct{})
	if r.Session != nil && !r.WorkspaceParent {
		agentRes = make(chan result, 1)
		go func() {
			if s.attaching {
				agentRes <- s.attachAgent(runCtx, runCmd)
				return
			}
			code, err := runCmd()
			agentRes <- result{code, err}
		}()
	}
	// The links' check and the copy may be execs in different containers:
	// they run side by side.
	var linksErr error
	var links sync.WaitGroup
	// A failed copy ends the links' wait (which retries for a minute).
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	if r.NetOff && claimed == "" && !s.attaching {
		// (main's agent, attached to, checks them itself before it
		// answers: openAttach.)
		links.Go(func() { linksErr = s.linksDown(lctx) })
	}
	if dirs := s.copyDirs(); len(dirs) > 0 && !s.wsByAttach {
		if err := s.whenStarted(ctx, func() error { return s.copyIn(ctx, dirs) }); err != nil {
			lcancel()
			links.Wait()
			stop()
			return s.fail(kube.ErrCluster, err)
		}
		s.mark("copied in")
	}
	close(s.filesIn)
	if s.delivered || s.attaching {
		// The session is ready once the agent and the workspace are in,
		// which the bridge's first spare (the attach, if any) waits for.
		if err := s.agentUp(ctx, agentRes); err != nil {
			lcancel()
			links.Wait()
			stop()
			return s.fail(kube.ErrCluster, err)
		}
	}
	links.Wait()
	if linksErr != nil {
		stop()
		return s.fail(kube.ErrCluster, linksErr)
	}
	if r.NetOff && claimed == "" && !s.attaching {
		s.mark("links down")
	}
	s.send(kube.Event{Started: true, Pod: s.pod})

	// The command.
	var timedOut bool
	var tmu sync.Mutex
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
	var sig *signaller
	if r.Session == nil {
		sig = s.signaller(runCtx)
	}
	go func() {
		for {
			select {
			case <-runCtx.Done():
				return
			case ctl := <-controls:
				if ctl.Signal != 0 && !sig.send(ctl.Signal) {
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
	var code int
	var err error
	if agentRes != nil {
		res := <-agentRes
		code, err = res.code, res.err
	} else {
		code, err = runCmd()
	}
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

// agentUp waits, for a pod that got its files through its volumes, until
// the bridge's first spare is ready (the agent and the workspace are in),
// or reports why it never will: the pod failed, or the agent's exec ended
// first (main's unpack refused and ended the container, say: its reason
// is main's termination message).
func (s *session) agentUp(ctx context.Context, agentRes chan result) error {
	st := s.starting
	if st == nil {
		st = &podStart{done: make(chan struct{})} // a claimed pod: it runs
	}
	for {
		select {
		case <-s.spareUp:
			s.mark("agent in")
			return nil
		case res := <-agentRes:
			return s.mainEnded(ctx, res)
		case <-st.done:
			if st.err != nil {
				return st.err
			}
			st = &podStart{done: make(chan struct{})} // reported running: the others tell
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// mainEnded says why the agent's exec ended before the agent was in:
// main's end, as the pod's status tells it within a few seconds, else
// the exec's own.
func (s *session) mainEnded(ctx context.Context, res result) error {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		p, err := s.c.cs.CoreV1().Pods(s.c.ns).Get(ctx, s.pod, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == mainName && t != nil {
				return fmt.Errorf("pod %s: main ended (%d %s) before the session's agent was in: %s", s.pod, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
			}
		}
	}
	if res.err != nil {
		return fmt.Errorf("the session's agent in pod %s: %w", s.pod, res.err)
	}
	return fmt.Errorf("the session's agent in pod %s ended with status %d before it was in", s.pod, res.code)
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

// linksUp reports whether any link but loopback of the "NAME FLAGS"
// lines is up (or unreadable), and which.
func linksUp(lines []string) (bool, string) {
	for _, l := range lines {
		name, flags, ok := strings.Cut(l, " ")
		v, err := strconv.ParseUint(strings.TrimPrefix(flags, "0x"), 16, 32)
		if !ok || err != nil {
			return true, "unreadable link flags: " + l
		}
		if name != "lo" && v&1 != 0 {
			return true, "link " + name + " is up"
		}
	}
	return false, ""
}

// linksScript waits in main, for at most a minute, until every link but
// loopback is down (the netoff container's work), then lists each link's
// flags: one exec, whose wait is a poll in the pod rather than round
// trips through the API server. What it lists is checked here.
const linksScript = `i=0
while [ $i -lt 6000 ]; do
	up=
	for l in /sys/class/net/*; do
		f=$(cat "$l/flags" 2>/dev/null) || f=1
		[ "${l##*/}" = lo ] || [ $(( ${f:-1} & 1 )) -eq 0 ] || up=1
	done
	[ -z "$up" ] && break
	i=$((i+1))
	sleep 0.01 2>/dev/null || { sleep 1; i=$((i+99)); }
done
for l in /sys/class/net/*; do echo "${l##*/} $(cat "$l/flags")"; done`

// linksDown waits until main sees every link but loopback down (the
// netoff container's work), so that the command never has a network.
func (s *session) linksDown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 70*time.Second)
	defer cancel()
	// A failed netoff container ends the wait: the start's watch says so,
	// else (a pool's pod, which runs) a look at the pod every second.
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			var done <-chan struct{}
			if st := s.starting; st != nil {
				done = st.done
			}
			select {
			case <-ctx.Done():
				return
			case <-done:
				if s.startErr() != nil {
					cancel()
				}
				return
			case <-tick.C:
				if s.starting != nil {
					continue
				}
				if p, err := s.c.cs.CoreV1().Pods(s.c.ns).Get(ctx, s.pod, metav1.GetOptions{}); err == nil {
					if _, err := podReady(p); err != nil {
						cancel()
						return
					}
				}
			}
		}
	}()
	var last string
	s.afterFirst(ctx)
	for ctx.Err() == nil {
		var out, errb strings.Builder
		var code int
		err := s.whenStarted(ctx, func() error {
			out.Reset()
			errb.Reset()
			var err error
			code, err = s.exec(ctx, mainName, []string{"sh", "-c", linksScript}, nil, &out, &errb, false)
			return err
		})
		if err := s.startErr(); err != nil {
			return err
		}
		if err != nil || code != 0 {
			// A stream that broke: again, not in a tight loop.
			last = fmt.Sprintf("%v %d %s", err, code, errb.String())
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		var up bool
		if up, last = linksUp(strings.Split(strings.TrimSpace(out.String()), "\n")); !up {
			return nil
		}
		break // the script waited its minute
	}
	if err := s.startErr(); err != nil {
		return err
	}
	if p, err := s.c.cs.CoreV1().Pods(s.c.ns).Get(context.Background(), s.pod, metav1.GetOptions{}); err == nil {
		if _, err := podReady(p); err != nil {
			return err
		}
	}
	return fmt.Errorf("pod %s: its links are not down after 60 s (%s): network none cannot be given", s.pod, last)
}

// exec runs args in a container of the pod through the API server and
// returns its exit status.
func (s *session) exec(ctx context.Context, container string, args []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error) {
	req := s.c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.c.ns).Name(s.pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: args, Stdin: stdin != nil, Stdout: stdout != nil,
			Stderr: stderr != nil && !tty, TTY: tty}, scheme.ParameterCodec)
	return s.stream(ctx, req, stdin, stdout, stderr, tty)
}

// attach joins stdin and stdout to those of container's own process (no
// terminal, no stderr): it starts nothing in the pod.
func (s *session) attach(ctx context.Context, container string, stdin io.Reader, stdout io.Writer) error {
	req := s.c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(s.c.ns).Name(s.pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true}, scheme.ParameterCodec)
	_, err := s.stream(ctx, req, stdin, stdout, nil, false)
	return err
}

// stream runs an exec's or attach's streams and returns the exit status
// the API server reports.
func (s *session) stream(ctx context.Context, req *rest.Request, stdin io.Reader, stdout, stderr io.Writer, tty bool) (int, error) {
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
	if stdin != nil {
		// Its first read: the kubelet found the container, which runs.
		stdin = &firstRead{r: stdin, f: s.execRan}
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
	if s.delivered {
		return nil // through the pod's volumes
	}
	if s.req.Session != nil && !s.warm && s.req.Session.AgentImage == "" {
		dirs = append(dirs, kube.Dir{Src: agentBinary(s.req.Session.Agent), Name: "agent", FileName: agentFile, Done: agentDone})
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
	code, err := s.exec(ctx, s.copier(), []string{"sh", "-c", `umask 0 && exec tar -x -f - -C "$0"`, stage}, pr, io.Discard, &errb, false)
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
	code, err := s.exec(ctx, s.copier(), []string{"tar", "-c", "-f", "-", "-C", stage + "/" + s.wsStage(), "."}, nil, pw, &errb, false)
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
