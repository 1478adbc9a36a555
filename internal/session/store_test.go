package session

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/pinfold/pinfold/internal/agent"
	"github.com/pinfold/pinfold/internal/procstat"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	for name, ok := range map[string]bool{"work": true, "a.b-c_d": true, "9lives": true, "": false, "-x": false,
		".hidden": false, "a/b": false, "a b": false, string(make([]byte, 64)): false} {
		if validName(name) != ok {
			t.Errorf("%q: %v", name, !ok)
		}
	}
}

// TestStore: records by id, prefix and name, per tenant; a live record
// whose supervisor is gone is lost.
func TestStore(t *testing.T) {
	st := Open(t.TempDir())
	a, err := st.Create("web", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Create("", "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create("bad name", ""); err == nil {
		t.Error("a bad name was accepted")
	}
	// a's supervisor: this process, alive.
	a.State, a.Pid = StateRunning, os.Getpid()
	a.PidStart = procstat.StartTime(os.Getpid())
	st.Save(a)
	if _, err := st.Create("web", ""); err == nil {
		t.Error("a running session's name was taken twice")
	}
	for _, ref := range []string{a.ID, a.ID[:5], "web"} {
		if r, err := st.Get(ref, ""); err != nil || r.ID != a.ID || r.State != StateRunning {
			t.Errorf("%q: %+v %v", ref, r, err)
		}
	}
	if _, err := st.Get(b.ID, ""); err != ErrNotFound {
		t.Errorf("another tenant's session: %v", err)
	}
	if _, err := st.Get(a.ID, "tenant"); err != ErrNotFound {
		t.Errorf("the owner's session for a tenant: %v", err)
	}
	// b's supervisor never existed (pid 1's start time is not 1).
	b.State, b.Pid, b.PidStart = StateRunning, 1, 1
	st.Save(b)
	r, err := st.Get(b.ID, "tenant")
	if err != nil || r.State != StateLost || r.Ended.IsZero() || time.Since(r.Ended) > time.Minute {
		t.Errorf("a session without its supervisor: %+v %v", r, err)
	}
	if err := st.Remove(a); err == nil {
		t.Error("a running session was removed")
	}
	if err := st.Remove(r); err != nil {
		t.Error(err)
	}
}

// TestGetIDBeforeName: an id names its session even when a newer one is
// called by it (pinfold exec's fast path takes a full id as the id). A
// live session's id cannot be taken as a name; an ended one's can.
func TestGetIDBeforeName(t *testing.T) {
	st := Open(t.TempDir())
	a, err := st.Create("", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(a.ID, ""); err == nil {
		t.Error("a live session's id was taken as a name")
	}
	a.State = StateStopped
	st.Save(a)
	time.Sleep(2 * time.Millisecond) // b is newer
	b, err := st.Create(a.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := st.Get(a.ID, ""); err != nil || r.ID != a.ID {
		t.Errorf("%s named %s, not the session of that id: %+v %v", a.ID, b.ID, r, err)
	}
}

// TestRecordInItsOwnDirectory: a record is taken only from the directory
// of its id: one whose id is a path elsewhere ("../victim") is no session,
// so that marking it lost removes nothing and writes nothing outside.
func TestRecordInItsOwnDirectory(t *testing.T) {
	dir := t.TempDir()
	st := Open(dir)
	victim := filepath.Join(dir, "victim")
	if err := os.MkdirAll(filepath.Join(victim, "run", "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	id := "aaaaaaaaaaaa"
	if err := os.MkdirAll(st.Path(id), 0o700); err != nil {
		t.Fatal(err)
	}
	// Running, its supervisor gone: found lost when listed.
	b, _ := json.Marshal(&Record{ID: "../victim", State: StateRunning, Pid: 1, PidStart: 1})
	if err := os.WriteFile(filepath.Join(st.Path(id), "session.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := st.List("")
	if err != nil || len(all) != 0 {
		t.Errorf("a record of another directory listed: %+v %v", all, err)
	}
	if _, err := st.Get(id, ""); err != ErrNotFound {
		t.Errorf("a record of another directory found: %v", err)
	}
	st.CheckAll()
	if _, err := os.Stat(filepath.Join(victim, "run", "keep")); err != nil {
		t.Errorf("marking it lost removed outside its directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(victim, "session.json")); err == nil {
		t.Error("marking it lost wrote a record outside its directory")
	}
}

// TestCheckRecordsOnce: many look at once at a session whose supervisor
// (a waiter it handed off to) ended, leaving the agent's exit marker:
// each sees it stopped as the marker says, and its record stays whole.
// (Recorded by each at once, the first removed the marker and the
// others recorded it lost; two writing one temporary file left the
// record torn, unreadable, and the session's stop failed on it.)
func TestCheckRecordsOnce(t *testing.T) {
	st := Open(t.TempDir())
	for round := 0; round < 20; round++ {
		r, err := st.Create("", "tenant")
		if err != nil {
			t.Fatal(err)
		}
		// Its supervisor is gone (pid 1's start time is not 1), and the
		// waiter removed the empty changeset.
		r.State, r.Pid, r.PidStart, r.Changeset = StateRunning, 1, 1, "000000000000"
		st.Save(r)
		if err := os.WriteFile(filepath.Join(st.Path(r.ID), "run", agent.ExitMarker), []byte("stopped"), 0o600); err != nil {
			t.Fatal(err)
		}
		got := make(chan *Record, 16)
		for i := 0; i < cap(got); i++ {
			go func() {
				r, err := st.Get(r.ID, "tenant")
				if err != nil {
					t.Error(err)
				}
				got <- r
			}()
		}
		for i := 0; i < cap(got); i++ {
			if g := <-got; g != nil && (g.State != StateStopped || g.Reason != "stopped" || g.Changeset != "") {
				t.Errorf("round %d: a look found it %s (%s), changeset %q", round, g.State, g.Reason, g.Changeset)
			}
		}
		if g, err := st.load(r.ID); err != nil || g.State != StateStopped || g.Reason != "stopped" {
			t.Fatalf("round %d: its record: %+v %v", round, g, err)
		}
	}
}
