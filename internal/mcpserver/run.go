package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// maxOutput bounds each of a run's outputs kept for the model, as the
// API's exec bounds its.
const maxOutput = 8 << 20

// RunChangeset is the changeset a run kept, as pinfold run --json gives it.
type RunChangeset struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Added    int    `json:"added"`
	Modified int    `json:"modified"`
	Deleted  int    `json:"deleted"`
}

// runLine is the part of pinfold run --json's line the tool reports.
type runLine struct {
	Status    int           `json:"status"`
	Signal    string        `json:"signal,omitempty"`
	Reason    string        `json:"reason"`
	Error     *apiError     `json:"error,omitempty"`
	Changeset *RunChangeset `json:"changeset,omitempty"`
	LimitsHit []string      `json:"limits_hit"`
	// Violations are what the network policy blocked, as pinfold gives them.
	Violations []json.RawMessage `json:"violations"`
}

// UnmarshalJSON reads the error as the CLI writes it (code, message, why, fix).
func (e *apiError) UnmarshalJSON(b []byte) error {
	var v struct{ Code, Message, Why, Fix string }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	e.Code, e.Message, e.Fix = v.Code, v.Message, v.Fix
	if v.Why != "" {
		e.Message += ": " + v.Why
	}
	return nil
}

// tail keeps the first max bytes written, and the last 64 KiB apart:
// pinfold run's result line comes last, whatever the command printed.
type tail struct {
	head capped
	last []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.head.Write(p)
	t.last = append(t.last, p...)
	if n := len(t.last) - 64<<10; n > 0 {
		t.last = append(t.last[:0], t.last[n:]...)
	}
	return len(p), nil
}

type capped struct {
	b   []byte
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := maxOutput - len(c.b)
	if room < len(p) {
		c.b, c.cut = append(c.b, p[:max(room, 0)]...), true
		return len(p), nil
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// pinfoldRun runs the command as pinfold run does, with pinfold run
// itself in the workspace: dispatch picks its profile, hooks run, the
// host backend's allow-list applies, and the changeset is the run's.
func (t *tools) pinfoldRun(ctx context.Context, in RunIn) (*RunOut, error) {
	args := []string{"run", "--json"}
	for _, e := range in.Env {
		args = append(args, "--env", e)
	}
	if in.Timeout != "" {
		args = append(args, "--timeout", in.Timeout)
	}
	if in.Stdin != "" {
		args = append(args, "--interactive") // else pinfold run gives none
	}
	cmd := exec.CommandContext(ctx, t.cfg.Pinfold, append(append(args, "--"), in.Command...)...)
	cmd.Dir = t.cfg.Workspace
	// Never this process's stdin and stdout: they are the protocol's.
	cmd.Stdin = strings.NewReader(in.Stdin)
	var stdout tail
	var stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A client gone stops the run as Ctrl-C would: pinfold cleans up.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("cannot run pinfold: %w", err)
	}
	i := bytes.LastIndex(stdout.last, []byte(`{"status":`))
	var line runLine
	if i < 0 || json.Unmarshal(stdout.last[i:], &line) != nil {
		return nil, fmt.Errorf("pinfold run gave no result: %v: %s", err, strings.TrimSpace(string(stderr.b)))
	}
	if line.Reason == "error" && line.Error != nil {
		return nil, line.Error
	}
	out := stdout.head.b
	// The result line is not the command's output.
	if cut := len(stdout.head.b) - (len(stdout.last) - i); !stdout.head.cut && cut >= 0 {
		out = out[:cut]
	}
	return &RunOut{ExitCode: line.Status, Signal: line.Signal, Stdout: string(out), Stderr: string(stderr.b),
		Truncated: stdout.head.cut || stderr.cut, TimedOut: line.Reason == "timeout", LimitsHit: line.LimitsHit,
		Blocked: len(line.Violations), Changeset: line.Changeset}, nil
}
