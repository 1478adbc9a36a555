package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/pinfold/pinfold/internal/agent"

	"github.com/pinfold/pinfold/internal/changeset"
	"github.com/pinfold/pinfold/internal/fault"
)

// Snapshot is a session's changeset at one moment, as an OCI layer
// (uncompressed tar, changeset.Export), kept in STORE/snapshots/ID.
type Snapshot struct {
	ID        string    `json:"id"`
	Session   string    `json:"session"`
	Tenant    string    `json:"tenant,omitempty"`
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	Digest    string    `json:"digest"` // sha256 of the layer
	Size      int64     `json:"size"`
	MediaType string    `json:"media_type"`
}

func snapshotsDir(st *Store) string { return filepath.Join(filepath.Dir(st.Dir), "snapshots") }

// LayerPath is a snapshot's layer.
func (st *Store) LayerPath(id string) string { return filepath.Join(snapshotsDir(st), id, "layer.tar") }

// TakeSnapshot exports the session's changeset as it is now.
func TakeSnapshot(ctx context.Context, st *Store, r *Record) (*Snapshot, error) {
	if r.Changeset == "" {
		return nil, fault.New(fault.NoChangeset, "session "+r.ID+" keeps no changeset", "its access is not changeset",
			"start the session with the default --access changeset to snapshot it", nil)
	}
	cs, err := changeset.Open(filepath.Dir(st.Dir), r.Changeset)
	if err != nil {
		return nil, fault.New(fault.NoChangeset, "no changeset "+r.Changeset, err.Error(), "", err)
	}
	roots := cs.Roots()
	entries, err := changeset.Scan(ctx, roots)
	if err != nil {
		return nil, fault.New(fault.Store, "cannot read changeset "+r.Changeset, err.Error(), "", err)
	}
	var b [6]byte
	rand.Read(b[:])
	s := &Snapshot{ID: hex.EncodeToString(b[:]), Session: r.ID, Tenant: r.Tenant, Workspace: r.Workspace,
		Created: time.Now().UTC(), MediaType: changeset.LayerMediaType}
	dir := filepath.Join(snapshotsDir(st), s.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fault.New(fault.Store, "cannot store the snapshot", err.Error(), "", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "layer.tar"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fault.New(fault.Store, "cannot store the snapshot", err.Error(), "", err)
	}
	h := sha256.New()
	cw := &counter{w: io.MultiWriter(f, h)}
	err = changeset.Export(cw, roots, entries)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fault.New(fault.Store, "cannot export changeset "+r.Changeset, err.Error(), "", err)
	}
	s.Digest, s.Size = "sha256:"+hex.EncodeToString(h.Sum(nil)), cw.n
	meta, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "snapshot.json"), append(meta, '\n'), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fault.New(fault.Store, "cannot store the snapshot", err.Error(), "", err)
	}
	return s, nil
}

type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// OpenSnapshot finds a snapshot of tenant.
func OpenSnapshot(st *Store, id, tenant string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(snapshotsDir(st), filepath.Base(id), "snapshot.json"))
	var s Snapshot
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || s.Tenant != tenant || s.ID != id {
		return nil, fault.New(fault.SessionNotFound, "no snapshot "+id, "", "pinfold session snapshots lists them", err)
	}
	return &s, nil
}

// Fits refuses a snapshot taken in another workspace than ws: check it
// before starting the session it is for.
func (s *Snapshot) Fits(ws string) error {
	if ws != s.Workspace {
		return fault.New(fault.SessionRefused, "snapshot "+s.ID+" was taken in "+s.Workspace,
			"a snapshot restores into a session of the same workspace (this one is "+ws+")",
			"start the session in "+s.Workspace, nil)
	}
	return nil
}

// Restore replays a snapshot in a running session: its files, deletions
// and directories land in the session's changeset (the snapshot's paths
// are those of the workspace it was taken in).
func Restore(ctx context.Context, st *Store, r *Record, s *Snapshot) error {
	if err := s.Fits(r.Workspace); err != nil {
		return err
	}
	f, err := os.Open(st.LayerPath(s.ID))
	if err != nil {
		return fault.New(fault.Store, "cannot read snapshot "+s.ID, err.Error(), "", err)
	}
	defer f.Close()
	if err := agent.Restore(ctx, st.Sock(r.ID), f); err != nil {
		return fault.New(fault.SessionRefused, "cannot restore snapshot "+s.ID, err.Error(), "", err)
	}
	return nil
}

// Snapshots lists tenant's snapshots ("" the local user's), newest first.
func Snapshots(st *Store, tenant string) ([]*Snapshot, error) {
	ents, err := os.ReadDir(snapshotsDir(st))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for _, e := range ents {
		if s, err := OpenSnapshot(st, e.Name(), tenant); err == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// RemoveSnapshot deletes one of tenant's snapshots.
func RemoveSnapshot(st *Store, id, tenant string) error {
	s, err := OpenSnapshot(st, id, tenant)
	if err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(snapshotsDir(st), s.ID))
}
