package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pinfold/pinfold/internal/agent"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/internal/untrusted"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/native"
)

// Session states.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateStopped  = "stopped" // ended: stopped, idle, or its sandbox ended
	StateFailed   = "failed"  // never started
	StateLost     = "lost"    // its supervisor died without recording an end
)

// Record is a session as the store keeps it (STORE/sessions/ID/session.json).
type Record struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	State     string    `json:"state"`
	Workspace string    `json:"workspace"`
	Backend   string    `json:"backend,omitempty"`
	Created   time.Time `json:"created"`
	Ended     time.Time `json:"ended,omitzero"`
	// Pid and PidStart identify the supervisor on the host.
	Pid      int    `json:"pid,omitempty"`
	PidStart uint64 `json:"pid_start,omitempty"`
	// Changeset is the id of the session's changeset, when it keeps one.
	Changeset string `json:"changeset,omitempty"`
	// Freezer is the session's freezer group, FreezerV2 whether it is
	// cgroup v2's ("" when the session cannot be paused).
	Freezer   string `json:"freezer,omitempty"`
	FreezerV2 bool   `json:"freezer_v2,omitempty"`
	// Idle is the idle timeout ("" none).
	Idle string `json:"idle,omitempty"`
	// Reason says how it ended: "stopped", "idle", "exited N", "killed"...
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	// Counts of the changeset when the session ended.
	Added    int `json:"added,omitempty"`
	Modified int `json:"modified,omitempty"`
	Deleted  int `json:"deleted,omitempty"`
}

// Finished records the end of the session whose changeset id a handed-off
// supervisor finished: pinfold __finish, which the waiter execs in the
// supervisor's process, calls it with the run's status and the changeset's
// outcome (its counts, or empty).
func (s *Store) Finished(changesetID string, status int, empty bool, added, modified, deleted int) {
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		r, err := s.load(e.Name())
		if err != nil || r.Changeset != changesetID || !r.Live() || r.Pid != os.Getpid() {
			continue
		}
		r.State, r.Ended = StateStopped, time.Now().UTC()
		r.Reason = "exited " + strconv.Itoa(status)
		switch status {
		case 124: // the waiter's status for Cmd.Timeout
			r.Reason = "timeout"
		case agent.ExitStopped:
			r.Reason = "stopped"
		case agent.ExitIdle:
			r.Reason = "idle"
		}
		if hit := s.limitsHit(r.ID); hit != "" && status != agent.ExitStopped && status != agent.ExitIdle {
			r.Reason = "limit hit: " + hit
		}
		if reason, ok := s.exitReason(r.ID); ok {
			r.Reason = reason
		}
		if empty {
			r.Changeset = ""
		}
		r.Added, r.Modified, r.Deleted = added, modified, deleted
		// Released before the record says it ended: whoever waits for
		// that (pinfold session stop) finds nothing of it left.
		s.removeFreezer(r.ID)
		os.RemoveAll(filepath.Join(s.Path(r.ID), "run"))
		os.RemoveAll(filepath.Join(s.Path(r.ID), "home"))
		s.Save(r)
	}
}

// limitsHitFile is where a session's waiter writes the limits it hit
// (sandbox.HandoffOptions.LimitsHitFile), in the session's directory,
// which the sandbox cannot write (it sees only run and home).
const limitsHitFile = "limits-hit"

// limitsHit reads the limits the session's waiter found hit, "" for none:
// only the names sandbox.Result.LimitsHit uses are taken.
func (s *Store) limitsHit(id string) string {
	b, err := untrusted.ReadSmall(filepath.Join(s.Path(id), limitsHitFile), 64)
	if err != nil {
		return ""
	}
	names := strings.Split(strings.TrimSuffix(string(b), "\n"), ", ")
	for _, n := range names {
		switch n {
		case sandbox.LimitTimeout, sandbox.LimitMemory, sandbox.LimitPids, sandbox.LimitTmp:
		default:
			return ""
		}
	}
	return strings.Join(names, ", ")
}

// maxExitMarker bounds the exit marker: the agent writes a word.
const maxExitMarker = 64

// exitReason reads the exit marker the agent left in the session's run
// directory. The sandbox can write that directory: a link there is not
// followed, a FIFO not waited on, a large file not read, and only the
// reasons the agent writes are taken; anything else is logged and left,
// so that nothing a sandbox wrote becomes the session's reason.
func (s *Store) exitReason(id string) (string, bool) {
	path := filepath.Join(s.Path(id), "run", agent.ExitMarker)
	b, err := untrusted.ReadSmall(path, maxExitMarker)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err == nil {
		switch reason := string(b); reason {
		case "stopped", "idle":
			return reason, true
		}
		err = fmt.Errorf("%s holds %d bytes that are no exit reason", path, len(b))
	}
	fmt.Fprintf(os.Stderr, "pinfold: session %s: ignoring its exit marker: %v\n", id, err)
	return "", false
}

// Live reports whether the session's sandbox may still be up.
func (r *Record) Live() bool {
	return r.State == StateStarting || r.State == StateRunning || r.State == StatePaused
}

// Store is the sessions directory of pinfold's store.
type Store struct{ Dir string }

// Open returns the sessions of the store at storeDir.
func Open(storeDir string) *Store { return &Store{Dir: filepath.Join(storeDir, "sessions")} }

// Path returns the directory of a session.
func (s *Store) Path(id string) string { return filepath.Join(s.Dir, id) }

// Sock is the host path of a session's agent socket.
func (s *Store) Sock(id string) string { return filepath.Join(s.Dir, id, "run", agent.SockName) }

// LogPath is a session's log: the agent's and the supervisor's output.
func (s *Store) LogPath(id string) string { return filepath.Join(s.Dir, id, "log") }

// validName: a letter or digit, then letters, digits, '_', '.', '-'; at
// most 63 (no regexp: its compilation would run at every start-up).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// ErrNotFound is returned for an unknown session.
var ErrNotFound = errors.New("no such session")

// Create makes a new session's directory and record.
func (s *Store) Create(name, tenant string) (*Record, error) {
	if name != "" {
		if !validName(name) {
			return nil, fmt.Errorf("invalid session name %q: letters, digits, '_', '.', '-', at most 63", name)
		}
		if r, err := s.Get(name, tenant); err == nil && r.Live() {
			return nil, fmt.Errorf("a session named %s is running (%s)", name, r.ID)
		}
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, err
	}
	var b [6]byte
	rand.Read(b[:])
	r := &Record{ID: hex.EncodeToString(b[:]), Name: name, Tenant: tenant, State: StateStarting, Created: time.Now().UTC()}
	dir := s.Path(r.ID)
	for _, d := range []string{dir, filepath.Join(dir, "run"), filepath.Join(dir, "home")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	return r, s.Save(r)
}

// Save writes r atomically, through a temporary file of its own: two
// writers at once never interleave their bytes (one temporary name for
// all once left a record torn, which no one could read again), and the
// last rename wins whole.
func (s *Store) Save(r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.Path(r.ID), ".session.json.*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.Path(r.ID), "session.json"))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (s *Store) load(id string) (*Record, error) {
	b, err := os.ReadFile(filepath.Join(s.Path(id), "session.json"))
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	// The record names the directory that Save, check and Remove write
	// and remove below: it must be its own (as the exec fast path,
	// initc/fastexec.c, requires too), never a path elsewhere.
	if r.ID != id {
		return nil, fmt.Errorf("%s: the record of session %q is in the directory of %q", filepath.Join(s.Path(id), "session.json"), r.ID, id)
	}
	return &r, nil
}

// supervisorAlive reports whether r's supervisor still runs. A supervisor
// that hands off to the waiter execs from one of its threads; while the
// kernel makes that thread the process's leader, the old leader shows as
// a zombie for a moment: it is asked again before being taken for dead.
func supervisorAlive(r *Record) bool {
	return procstat.Alive(r.Pid, r.PidStart)
}

// check marks a live record whose supervisor is gone as lost (or
// stopped, when its waiter left word of how it ended). Many may look at
// once: under the session's lock, the record is read again, and one
// that ended meanwhile is returned as it is, so that the end is recorded
// once, from what the waiter left (the agent's exit marker, which the
// first check removes with the run directory).
func (s *Store) check(r *Record) *Record {
	if !r.Live() || r.Pid <= 0 || supervisorAlive(r) {
		return r
	}
	unlock, err := s.lock(r.ID)
	if err != nil {
		return r // removed meanwhile
	}
	cur, err := s.load(r.ID)
	if err != nil || !cur.Live() {
		unlock()
		if err != nil {
			return r
		}
		return cur // it ended while we looked
	}
	r = cur
	if r.Freezer != "" {
		// Frozen processes take no signal, not even the kill that
		// came with their supervisor's death: thawed, they die
		// (paused or not: a pause may have failed half way).
		freeze(r.Freezer, r.FreezerV2, false)
	}
	r.State, r.Reason, r.Ended = StateLost, "its supervisor died", time.Now().UTC()
	if hit := s.limitsHit(r.ID); hit != "" {
		// The waiter it handed off to ended it on a limit, and
		// with no changeset to record left no record but this.
		r.State, r.Reason = StateStopped, "limit hit: "+hit
	}
	if reason, ok := s.exitReason(r.ID); ok {
		// The agent ended as asked and the supervisor (the waiter it
		// handed off to) left no record: the session stopped.
		r.State, r.Reason = StateStopped, reason
		if _, err := os.Stat(filepath.Join(filepath.Dir(s.Dir), "changesets", r.Changeset)); r.Changeset != "" && err != nil {
			r.Changeset = "" // the waiter removed it: nothing was written
		}
	}
	os.RemoveAll(filepath.Join(s.Path(r.ID), "run"))
	os.RemoveAll(filepath.Join(s.Path(r.ID), "home"))
	s.removeFreezer(r.ID)
	s.Save(r)
	unlock()
	// Its sandbox died with it (the parent-death signal); what the
	// kernel cannot remove goes now: its cgroups, named after its
	// supervisor, and only those (a clean of every group that looks
	// stale, run on each look at a session, once killed a session
	// that was handing off: its supervisor looked dead for a moment).
	native.CleanOf(context.Background(), r.Pid, r.PidStart)
	if st, err := store.Open(filepath.Dir(s.Dir)); err == nil {
		st.CleanTmp()
	}
	return r
}

// List returns the sessions of tenant ("" the local user's), newest first,
// with those whose supervisor died marked lost.
func (s *Store) List(tenant string) ([]*Record, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := s.load(e.Name())
		if err != nil || r.Tenant != tenant {
			continue
		}
		out = append(out, s.check(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// CheckAll marks every tenant's sessions whose supervisor died as lost.
func (s *Store) CheckAll() {
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		if r, err := s.load(e.Name()); err == nil {
			s.check(r)
		}
	}
}

// Get finds a session of tenant by id, name (the newest of that name) or
// unique id prefix, in that order: an id names its session whatever
// another is called, as pinfold exec's fast path (initc/fastexec.c) takes it.
func (s *Store) Get(ref, tenant string) (*Record, error) {
	if ref == "" {
		return nil, ErrNotFound
	}
	all, err := s.List(tenant)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.ID == ref {
			return r, nil
		}
	}
	for _, r := range all {
		if r.Name == ref {
			return r, nil
		}
	}
	var found *Record
	for _, r := range all {
		if strings.HasPrefix(r.ID, ref) {
			if found != nil {
				return nil, fmt.Errorf("%q names several sessions", ref)
			}
			found = r
		}
	}
	if found == nil {
		return nil, ErrNotFound
	}
	return found, nil
}

// Remove deletes an ended session's record.
func (s *Store) Remove(r *Record) error {
	if r.Live() {
		return errors.New("session " + r.ID + " is running: stop it first")
	}
	return os.RemoveAll(s.Path(r.ID))
}
