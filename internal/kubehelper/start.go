package kubehelper

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podStart follows a new pod's start. The kubelet reports containers
// running on its next relist of the runtime (every second), well after
// they run and take execs; the helper does not wait for that report but
// tries its execs at once (whenStarted), and the watch ends them should
// the pod never run (an image that cannot be had, a failed container).
//
// While the pod starts, one try at a time probes it (probe is its token):
// a refused exec costs the kubelet a look at the container runtime, and
// execs tried side by side every 25 ms (the copy, the agent, a bridge
// spare, the links' check) slowed the start of the very container they
// waited for. The others wait until an exec has run in it (runs: its stdin
// was read, which the API server's stream does only once the kubelet
// found the container), then try at once.
type podStart struct {
	done  chan struct{} // closed once the pod runs, or never will
	err   error         // why it never will; read after done
	probe chan struct{} // holds the probing try's token
	runs  chan struct{} // closed once an exec ran in the pod
	ran   sync.Once
}

// newPodStart follows a start with probes tries at a time: one, or two
// for a pod that got its files through its volumes, whose agent's exec
// and the bridge's first spare are both what its start waits for (one
// after the other, the second's round trip came after the first ran).
func newPodStart(probes int) *podStart {
	return &podStart{done: make(chan struct{}), probe: make(chan struct{}, probes), runs: make(chan struct{})}
}

// execRan records that an exec's stream read its stdin: the container
// runs.
func (s *session) execRan() {
	if st := s.starting; st != nil {
		st.ran.Do(func() {
			s.mark("first exec ran")
			close(st.runs)
		})
	}
}

// firstRead calls f on its first Read.
type firstRead struct {
	r    io.Reader
	once sync.Once
	f    func()
}

func (r *firstRead) Read(p []byte) (int, error) {
	r.once.Do(r.f)
	return r.r.Read(p)
}

// afterFirst waits, while the pod starts, for an exec to have run in it
// or the pod to be reported running: for a try without stdin, which
// cannot tell the others that the container runs (a long one, netoff's
// links check, would hold the probe).
func (s *session) afterFirst(ctx context.Context) {
	if st := s.starting; st != nil {
		select {
		case <-st.runs:
		case <-st.done:
		case <-ctx.Done():
		}
	}
}

// watchStart watches pod until its containers run or it fails.
func (s *session) watchStart(ctx context.Context, pod *corev1.Pod) *podStart {
	probes := 1
	if s.delivered {
		probes = 2
	}
	st := newPodStart(probes)
	go func() {
		st.err = s.waitRunning(ctx, pod)
		if st.err == nil {
			s.mark("pod running (reported)")
		}
		close(st.done)
	}()
	return st
}

// startErr is why the pod will never run, or nil.
func (s *session) startErr() error {
	st := s.starting
	if st == nil {
		return nil
	}
	select {
	case <-st.done:
		return st.err
	default:
		return nil
	}
}

// notStarted reports whether an exec failed because its container does
// not run yet: the API server or the kubelet refused it before anything
// ran (so nothing of its stdin was read), and it may be tried again.
func notStarted(err error) bool {
	msg := err.Error()
	for _, s := range []string{"pod does not exist", "container not found", "not found in pod", "does not have a host assigned", "is not running", "not in running state", "ContainerCreating"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// whenStarted runs try, and again every 25 ms while it fails because its
// container does not run yet and the pod is starting; once the pod is
// reported running, one more try is final.
func (s *session) whenStarted(ctx context.Context, try func() error) error {
	for {
		st := s.starting
		// A try begun once the pod was reported running is final: its
		// command may have run (a container that died under it answers
		// "not found" too), and must not run twice.
		running := st == nil
		if !running {
			select {
			case <-st.done:
				if st.err != nil {
					return st.err // it never will
				}
				running = true
			default:
			}
		}
		probing := false
		if !running {
			select {
			case st.probe <- struct{}{}:
				probing = true
			case <-st.runs:
			case <-st.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := try()
		if probing {
			<-st.probe
		}
		if err == nil || running || !notStarted(err) {
			return err
		}
		select {
		case <-st.done:
			if st.err != nil {
				return st.err
			}
			return try()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// signaller is a shell in the main container, started beside a run's
// command, that sends each signal number written to its stdin to the
// command's processes: a signal then reaches them in a write, not in a
// new exec through the API server (which a loaded cluster answers in a
// second or more). It ignores the signals it sends (kill -1 spares its
// caller, and a kill that is not a builtin its shell); the stop signals,
// which would stop a shell whose kill is not a builtin, and those it
// cannot ignore take the exec.
type signaller struct {
	mu    sync.Mutex
	ch    chan []byte // unbuffered: a send is a signal the exec's stdin took
	ready bool
	dead  bool
}

// sendWait bounds how long send waits for the exec's stdin to take a
// signal before the caller falls back to a kill exec: a shell the command
// killed, or a stream that stopped reading, must not hold signals up.
const sendWait = 100 * time.Millisecond

// signalReader is the signal shell's stdin: the lines send hands it,
// until ctx ends.
type signalReader struct {
	ch   <-chan []byte
	done <-chan struct{}
	rest []byte
}

func (r *signalReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		select {
		case r.rest = <-r.ch:
		case <-r.done:
			return 0, io.EOF
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// ignored are the signals the signaller's shell ignores (all but KILL,
// STOP, CHLD, CONT and the terminal stops) and so may send.
var ignored = []int{1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 23, 24, 25, 26, 27, 28, 29, 30, 31}

func (s *session) signaller(ctx context.Context) *signaller {
	g := &signaller{ch: make(chan []byte)}
	pr := &signalReader{ch: g.ch, done: ctx.Done()}
	var traps []string
	for _, n := range ignored {
		traps = append(traps, strconv.Itoa(n))
	}
	// "ready" once the traps are set: signals are sent through it only
	// then.
	script := fmt.Sprintf(`trap '' %s; echo ready; while read s; do kill -"$s" -1 2>/dev/null; done`, strings.Join(traps, " "))
	out := &readyWriter{ready: func() {
		g.mu.Lock()
		g.ready = true
		g.mu.Unlock()
	}}
	go func() {
		s.whenStarted(ctx, func() error {
			_, err := s.exec(ctx, mainName, []string{"sh", "-c", script}, pr, out, io.Discard, false)
			return err
		})
		g.mu.Lock()
		g.dead = true
		g.mu.Unlock()
	}()
	return g
}

// send writes sig to the signaller; false: it cannot take it (not ready,
// ended, or a signal it does not ignore), and the caller execs kill.
func (g *signaller) send(sig int) bool {
	if g == nil {
		return false
	}
	ok := false
	for _, n := range ignored {
		ok = ok || n == sig
	}
	// Not under the lock: the goroutine that marks the shell dead takes
	// it, and a stalled stdin must not keep it waiting.
	g.mu.Lock()
	usable := ok && g.ready && !g.dead
	g.mu.Unlock()
	if !usable {
		return false
	}
	t := time.NewTimer(sendWait)
	defer t.Stop()
	select {
	case g.ch <- []byte(strconv.Itoa(sig) + "\n"):
		return true
	case <-t.C:
		return false
	}
}

// readyWriter calls ready once something has been written to it.
type readyWriter struct {
	once  sync.Once
	ready func()
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.once.Do(w.ready)
	return len(b), nil
}
