package sandbox

import (
	"context"
	"net"
	"path/filepath"
	"strings"
)

// Sessioner is implemented by runtimes that can keep a sandbox up between
// commands (sandbox/native). It is optional: a runtime without it has no
// sessions, and callers find out with a type assertion:
//
//	s, ok := rt.(sandbox.Sessioner)
//	if !ok { ... this runtime makes a fresh sandbox for every command ... }
//	sess, err := s.Session(ctx, sandbox.Spec{Workspace: dir})
//	defer sess.Close()
//	p, err := sess.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo hi > /tmp/x"}})
//	p.Wait()
//	p, err = sess.Run(ctx, &sandbox.Cmd{Args: []string{"cat", "/tmp/x"}, Stdout: os.Stdout}) // hi
type Sessioner interface {
	// Session starts a sandbox of spec that stays up until it is closed.
	Session(ctx context.Context, spec Spec) (Session, error)
}

// Session is a sandbox that stays up. Unlike a Sandbox made by New, its Run
// starts every command in the same sandbox: they share its /tmp, its
// writable home (HOME, /home/sandbox), the processes they leave running
// and their writes (the Spec's Changeset). A command's Process streams
// Cmd's Stdin, Stdout and Stderr while it runs, sends signals to its
// process group and, with Cmd.TTY, resizes its terminal. Cmd.Env, when
// set, is the command's whole environment; nil is the session's. Close
// ends everything in the session.
type Session interface {
	Sandbox
	// ForwardPort listens on hostAddr ("127.0.0.1:8080"; port 0 picks one)
	// and forwards every connection to port on the sandbox's own loopback,
	// whatever its network, until the listener or the session is closed.
	ForwardPort(hostAddr string, port int) (net.Listener, error)
}

// RunScript runs code with interpreter ("python3", "sh", "bash", "node",
// "ruby", "perl"... a name or a path in the sandbox) in sb and waits for it.
// The code reaches the interpreter on its standard input, so nothing is
// written to the sandbox's files; cmd (nil for none) gives the rest: its
// Stdin is not used, its Args are passed to the script after the code.
func RunScript(ctx context.Context, sb Sandbox, code, interpreter string, cmd *Cmd) (*Result, error) {
	c := Cmd{}
	if cmd != nil {
		c = *cmd
	}
	// Each interpreter's way to read the program from stdin, with the
	// arguments after it.
	var args []string
	switch strings.TrimRight(filepath.Base(interpreter), "0123456789.") {
	case "sh", "bash", "dash", "zsh", "ksh", "ash":
		args = []string{interpreter, "-s", "--"}
	default: // python, node, ruby, perl, php, Rscript...
		args = []string{interpreter, "-"}
	}
	c.Args = append(args, c.Args...)
	c.Stdin = strings.NewReader(code)
	c.TTY = false
	p, err := sb.Run(ctx, &c)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}
