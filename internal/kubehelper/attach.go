package kubehelper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/kube"
)

// attachWait bounds the wait for the agent's answer once the attach's
// stream runs and the agent's files are in (main's unpack, or the copy by
// exec, come first); netoff's links get their minute more.
const attachWait = 10 * time.Second

// openAttach attaches to main, whose command ends in the agent (deliver
// in attach mode), hands the agent the session's environment and returns
// the stream as the bridge's first spare once the agent answers. An
// attach runs nothing in the pod (an exec is a runc exec there, the
// first connection's fixed cost otherwise). Nothing main writes before
// the attach is seen; it writes nothing before the environment is in.
//
// The error is an attachError once the stream ran: the environment may
// be in main's agent, and the session must not start another.
func (s *session) openAttach(ctx context.Context) (*spare, error) {
	actx, cancel := context.WithCancel(ctx)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sp := &spare{in: inW, done: make(chan struct{}), end: cancel}
	connected := make(chan struct{})
	var once sync.Once
	var streamed atomic.Bool // the stream's first read of stdin came: it ran
	d := attachWait
	if s.req.NetOff {
		d += time.Minute
	}
	var aerr error
	go func() {
		last := ""
		aerr = s.whenStarted(actx, func() error {
			err := s.attach(actx, mainName, &firstRead{r: inR, f: func() {
				streamed.Store(true)
				once.Do(func() { close(connected) })
			}}, outW)
			if err != nil && err.Error() != last && actx.Err() == nil {
				last = err.Error()
				s.mark("attach: " + last)
			}
			return err
		})
		if aerr == nil {
			aerr = errors.New("main's stream ended (did main end?)")
		}
		outW.CloseWithError(aerr)
		inR.CloseWithError(aerr)
		close(sp.done)
	}()
	sent := make(chan struct{})
	progress := make(chan struct{}, 1)
	pw := progressWriter{w: inW, progress: progress}
	go func() {
		defer close(sent)
		// The environment, then the workspace (a claimed pod's), in
		// chunks: buffered, the stream sends each write as a frame.
		if err := agent.WriteEnv(pw, s.req.Session.Env); err != nil {
			inW.CloseWithError(err)
			return
		}
		bw := bufio.NewWriterSize(pw, 1<<20)
		cw := agent.ChunkWriter{W: bw}
		if s.wsByAttach {
			if err := kube.WriteTar(cw, s.copyDirs()); err != nil {
				inW.CloseWithError(err)
				return
			}
		}
		if cw.Close() == nil {
			bw.Flush()
		}
	}()
	br := bufio.NewReaderSize(outR, 64<<10)
	// A line main writes is read within the reader's buffer: whatever
	// writes to main's stdout first is not buffered here without bound.
	readLine := func() (string, error) {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			err = fmt.Errorf("main wrote a line of more than %d bytes before the agent answered", br.Size())
		}
		return string(b), err
	}
	ready := make(chan error, 1)
	go func() {
		line, err := readLine()
		if err == nil && s.req.NetOff && !strings.HasPrefix(line, agent.LinksLine) {
			// Network none by netoff: no answer counts before the links'.
			ready <- &linksError{fmt.Errorf("pod %s: the agent answered without its links: network none cannot be given", s.pod)}
			return
		}
		if l, ok := strings.CutPrefix(line, agent.LinksLine); ok && err == nil {
			// Network none by netoff: main's agent waited for every link
			// but loopback to be down; what it saw is checked here.
			if up, which := linksUp(strings.Split(strings.TrimSpace(l), ";")); up {
				ready <- &linksError{fmt.Errorf("pod %s: its links are not down after 60 s (%s): network none cannot be given", s.pod, which)}
				return
			}
			s.mark("links down")
			line, err = readLine()
		}
		if err == nil && line != agent.BridgeReady {
			err = fmt.Errorf("the agent in main: %s", strings.TrimSpace(strings.TrimPrefix(line, agent.AttachError)))
		}
		ready <- err
	}()
	// The wait begins once the stream runs, the agent's files are in
	// (filesIn: a copy by exec may take long) and the workspace sent.
	filesIn := s.filesIn
	ran := false
	var timeout <-chan time.Time
	var err error
wait:
	for {
		select {
		case err = <-ready:
			if err == nil {
				sp.out = &agent.ChunkReader{R: br}
				return sp, nil
			}
			break wait
		case <-connected:
			connected, ran = nil, true
		case <-filesIn:
			filesIn = nil
		case <-sent:
			// The answer's bound starts once all is sent.
			sent = nil
			if timeout != nil {
				timeout = time.After(d)
			}
		case <-progress:
			// The workspace moves: its send is bounded per write.
			if timeout != nil && sent != nil {
				timeout = time.After(d)
			}
		case <-timeout:
			err = fmt.Errorf("the agent in main did not answer within %v of the attach", d)
			break wait
		case <-ctx.Done():
			err = ctx.Err()
			break wait
		}
		// Armed once the stream runs and the files are in: a main that
		// stops reading its stdin fails the start too.
		if ran && filesIn == nil && timeout == nil {
			timeout = time.After(d)
		}
	}
	cancel()
	inW.Close()
	outR.Close()
	<-sp.done
	// The stream may have run though the loop never saw it (its failure
	// came first): then too the environment may be in main's agent.
	ran = ran || streamed.Load()
	var le *linksError
	if ran && !errors.As(err, &le) {
		err = &attachError{err}
	}
	return nil, err
}

// progressWriter tells, without blocking, that a write went through.
type progressWriter struct {
	w        io.Writer
	progress chan struct{}
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if n > 0 {
		select {
		case p.progress <- struct{}{}:
		default:
		}
	}
	return n, err
}

// attachError: the attach failed after its stream ran.
type attachError struct{ error }

// linksError: main's agent saw a link up; the session must not start.
type linksError struct{ error }

// attachAgent serves a cold session whose main runs the agent: the attach
// is the bridge's first spare, and the agent's end is a wait in the pod
// for its status (the bridge's wait mode). Should the attach fail (a
// user who may not create pods/attach, say), the agent is started by exec
// as without attach mode, with exec spares: main's agent, never handed
// its environment, serves nothing.
func (s *session) attachAgent(ctx context.Context, execAgent func() (int, error)) result {
	sp, err := s.openAttach(ctx)
	if err == nil {
		s.mark("agent by attach")
		s.spareReady(sp)
		var code int
		err := s.whenStarted(ctx, func() error {
			var err error
			code, err = s.exec(ctx, mainName, []string{s.agentExe(), agent.BridgeCommand, agent.BridgeWait}, nil, io.Discard, io.Discard, false)
			return err
		})
		return result{code, err}
	}
	var le *linksError
	var ae *attachError
	if e := s.startErr(); e != nil || ctx.Err() != nil || errors.As(err, &le) || errors.As(err, &ae) {
		// Not refused but failed (or the pod's end): no other agent.
		switch {
		case e != nil:
		case ctx.Err() != nil:
			e = ctx.Err()
		case le != nil:
			e = le.error
		default:
			e = fmt.Errorf("the session's agent in pod %s: %w", s.pod, ae.error)
		}
		return result{0, e}
	}
	s.mark("agent by exec: " + err.Error())
	if s.req.NetOff && !s.warm {
		// Nothing is served before the links are down.
		if err := s.linksDown(ctx); err != nil {
			return result{0, err}
		}
		s.mark("links down")
	}
	if s.wsByAttach {
		// The workspace by exec, before any spare: the session is ready
		// once a spare is.
		if err := s.copyIn(ctx, s.copyDirs()); err != nil {
			return result{0, err}
		}
		s.mark("copied in")
	}
	s.took <- struct{}{}
	code, err := execAgent()
	return result{code, err}
}
