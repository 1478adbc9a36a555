package changeset

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Changeset statuses.
const (
	StatusRunning = "running" // the command still runs, or died before it could finish
	StatusOpen    = "open"    // finished, to review, apply or discard
	StatusApplied = "applied"
	StatusBroken  = "broken" // List only: meta.json is unreadable
)

// Meta is a changeset's metadata, kept in meta.json.
type Meta struct {
	ID        string     `json:"id"`
	Created   time.Time  `json:"created"`
	Finished  time.Time  `json:"finished,omitzero"`
	Command   []string   `json:"command"`
	Workspace string     `json:"workspace"`
	Roots     []MetaRoot `json:"roots"`
	Status    string     `json:"status"`
	ExitCode  int        `json:"exit_code"`
	// Counts are what the changeset changes, as of its last run or
	// partial apply (nil while a run writes to it).
	Counts *Counts `json:"counts,omitempty"`
	// BootID is the host's boot during which a run last wrote to the
	// changeset. Runs write their upper directories through volatile
	// overlays and record them unsynced: a changeset of an earlier boot
	// may have lost writes to a crash (EarlierBoot).
	BootID string `json:"boot_id,omitempty"`
}

// MetaRoot is one captured directory: its host path and the directory
// holding its upper and work directories, relative to the changeset's.
type MetaRoot struct {
	Path string `json:"path"`
	Dir  string `json:"dir"` // "r0", "r1", ...
}

// Changeset is a changeset in the store:
//
//	<store>/changesets/<id>/meta.json
//	<store>/changesets/<id>/fingerprints.json  the originals after the run
//	                                            (apart: listing needs only meta)
//	<store>/changesets/<id>/r<N>/upper   the overlay's upper directory for root N
//	<store>/changesets/<id>/r<N>/work    the overlay's work directory (never read)
//	<store>/changesets/<id>/lock         flock(2)ed while in use
type Changeset struct {
	Dir  string
	Meta Meta

	lock *os.File // while this process holds the lock
}

const (
	changesetsDir = "changesets"
	metaName      = "meta.json"
	fpName        = "fingerprints.json"
	lockName      = "lock"
	trashDir      = "trash"
	idLen         = 12
)

// Create makes a new changeset for a command about to run: an id, the
// upper and work directories of each path (the workspace when paths is
// empty), all mode 0700, and meta.json with status "running".
func Create(storeDir, workspace string, paths []string, command []string) (*Changeset, error) {
	c, unlock, err := CreateLocked(storeDir, workspace, paths, command)
	if err != nil {
		return nil, err
	}
	unlock()
	return c, nil
}

// CreateLocked is Create holding the changeset's lock, taken before its
// meta.json exists: nobody (pinfold clean, looking for the changesets of
// killed runs) ever sees it "running" and unlocked while it is made.
func CreateLocked(storeDir, workspace string, paths []string, command []string) (*Changeset, func(), error) {
	if len(paths) == 0 {
		paths = []string{workspace}
	}
	base := filepath.Join(storeDir, changesetsDir)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating a changeset: %w", err)
	}
	spread(base)
	var id, dir string
	for tries := 0; ; tries++ {
		id = fmt.Sprintf("%012x", rand.Uint64()>>16)
		dir = filepath.Join(base, id)
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || tries > 10 {
			return nil, nil, fmt.Errorf("creating a changeset: %w", err)
		}
	}
	c := &Changeset{Dir: dir, Meta: Meta{
		ID: id, Created: time.Now().UTC(), Command: slices.Clone(command),
		Workspace: workspace, Status: StatusRunning, BootID: BootID(),
	}}
	for i, p := range paths {
		r := MetaRoot{Path: p, Dir: "r" + strconv.Itoa(i)}
		for _, sub := range []string{"", "upper", "work"} {
			if err := os.Mkdir(filepath.Join(dir, r.Dir, sub), 0o700); err != nil {
				os.RemoveAll(dir)
				return nil, nil, fmt.Errorf("creating a changeset: %w", err)
			}
		}
		// The merged directory's own mode is the upper directory's: the
		// root's (0755, say) rather than 0700 inside the sandbox.
		if fi, err := os.Stat(p); err == nil {
			os.Chmod(filepath.Join(dir, r.Dir, "upper"), UpperMode(fi.Mode()))
		}
		c.Meta.Roots = append(c.Meta.Roots, r)
	}
	unlock, err := c.Lock()
	if errors.Is(err, ErrUnsupported) {
		unlock, err = func() {}, nil
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	// Not synced: a crash before the run ends loses nothing that was
	// synced either, and most runs end with nothing to keep.
	if err := c.save(false); err != nil {
		unlock()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return c, unlock, nil
}

// UpperMode is the mode of a root's upper directory for a root of mode m:
// its permissions and sticky bit, never less than the owner's rwx
// (overlayfs writes there as the owner).
func UpperMode(m fs.FileMode) fs.FileMode {
	return m&(fs.ModePerm|fs.ModeSticky) | 0o700
}

// Open finds a changeset by its id or a unique prefix of it.
func Open(storeDir, idOrPrefix string) (*Changeset, error) {
	if idOrPrefix == "" || strings.ContainsAny(idOrPrefix, "/\\.") {
		return nil, fmt.Errorf("%w: bad id %q", ErrNotFound, idOrPrefix)
	}
	ids, err := listIDs(storeDir)
	if err != nil {
		return nil, err
	}
	var match []string
	for _, id := range ids {
		if id == idOrPrefix {
			match = []string{id}
			break
		}
		if strings.HasPrefix(id, idOrPrefix) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("%w %q", ErrNotFound, idOrPrefix)
	case 1:
		return load(storeDir, match[0])
	}
	shown := match[:min(len(match), 5)]
	return nil, fmt.Errorf("%w %q: it matches %s", ErrAmbiguous, idOrPrefix, strings.Join(shown, ", "))
}

func listIDs(storeDir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(storeDir, changesetsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing changesets: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && len(e.Name()) == idLen && strings.Trim(e.Name(), "0123456789abcdef") == "" {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

func load(storeDir, id string) (*Changeset, error) {
	c := &Changeset{Dir: filepath.Join(storeDir, changesetsDir, id)}
	data, err := os.ReadFile(filepath.Join(c.Dir, metaName))
	if err != nil {
		return nil, fmt.Errorf("reading changeset %s: %w", id, err)
	}
	if err := json.Unmarshal(data, &c.Meta); err != nil {
		return nil, fmt.Errorf("reading changeset %s: %w", id, err)
	}
	if c.Meta.ID != id {
		return nil, fmt.Errorf("reading changeset %s: meta.json names %q", id, c.Meta.ID)
	}
	for _, r := range c.Meta.Roots {
		if !validRel(r.Dir) || strings.Contains(r.Dir, "/") {
			return nil, fmt.Errorf("reading changeset %s: bad root directory %q", id, r.Dir)
		}
	}
	return c, nil
}

// List returns the store's changesets, newest first. A changeset whose
// meta.json cannot be read is listed with status "broken", so that it
// can be removed.
func List(storeDir string) ([]*Changeset, error) {
	ids, err := listIDs(storeDir)
	if err != nil {
		return nil, err
	}
	var out []*Changeset
	for _, id := range ids {
		c, err := load(storeDir, id)
		if err != nil {
			if _, serr := os.Stat(filepath.Join(storeDir, changesetsDir, id, metaName)); errors.Is(serr, fs.ErrNotExist) {
				continue // being created
			}
			c = &Changeset{Dir: filepath.Join(storeDir, changesetsDir, id), Meta: Meta{ID: id, Status: StatusBroken}}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Changeset) int {
		if c := b.Meta.Created.Compare(a.Meta.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.Meta.ID, a.Meta.ID)
	})
	return out, nil
}

// Latest returns the newest open changeset of a workspace.
func Latest(storeDir, workspace string) (*Changeset, error) {
	all, err := List(storeDir)
	if err != nil {
		return nil, err
	}
	for _, c := range all {
		if c.Meta.Status == StatusOpen && c.Meta.Workspace == workspace {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no open changeset for %s", ErrNotFound, workspace)
}

// Roots returns the changeset's roots, for Scan, Apply and the writers.
func (c *Changeset) Roots() []Root {
	out := make([]Root, len(c.Meta.Roots))
	for i, r := range c.Meta.Roots {
		out[i] = Root{Lower: r.Path, Upper: filepath.Join(c.Dir, r.Dir, "upper")}
	}
	return out
}

// Prefix is how diff shows root i's paths: the workspace's as they are,
// captured directories' from / ("home/me/.config/tool/").
func (c *Changeset) Prefix(i int) string {
	if i == 0 && c.Meta.Roots[0].Path == c.Meta.Workspace {
		return ""
	}
	return strings.TrimPrefix(c.Meta.Roots[i].Path, "/") + "/"
}

// WorkDir returns the overlay work directory of root i.
func (c *Changeset) WorkDir(i int) string {
	return filepath.Join(c.Dir, c.Meta.Roots[i].Dir, "work")
}

// Save writes meta.json atomically and durably.
func (c *Changeset) Save() error { return c.save(true) }

// SaveUnsynced writes meta.json atomically, without waiting for the disk:
// the end of a run records its changeset so, since the fsync (a journal
// commit, 20 ms) would cost a run that wrote one file more than its
// sandbox. A record lost to a crash leaves the changeset interrupted, or
// without fingerprints, both of which apply refuses without --force.
func (c *Changeset) SaveUnsynced() error { return c.save(false) }

func (c *Changeset) save(durable bool) error {
	data, err := json.MarshalIndent(&c.Meta, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	write := writeFileSync
	if !durable {
		write = writeFileAtomic
	}
	if err := write(filepath.Join(c.Dir, metaName), data); err != nil {
		return fmt.Errorf("saving changeset %s: %w", c.Meta.ID, err)
	}
	return nil
}

// Fingerprints returns what the originals looked like after the run, for
// Apply's conflict check: nil when none were saved.
func (c *Changeset) Fingerprints() (Fingerprints, error) {
	data, err := os.ReadFile(filepath.Join(c.Dir, fpName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// Written unsynced, then a crash: empty, or zeros on a file system
	// that does not flush before a rename. None, then (apply wants
	// --force), rather than an error that --force could not get past.
	var fp Fingerprints
	if len(data) == 0 || json.Unmarshal(data, &fp) != nil {
		return nil, nil
	}
	return fp, nil
}

// SaveFingerprints writes fp atomically, unsynced (see SaveUnsynced).
func (c *Changeset) SaveFingerprints(fp Fingerprints) error {
	data, err := json.Marshal(fp)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(c.Dir, fpName), data); err != nil {
		return fmt.Errorf("saving changeset %s: %w", c.Meta.ID, err)
	}
	return nil
}

// Remove discards the changeset: its directory and everything in it,
// read-only directories included.
func (c *Changeset) Remove() error {
	if err := removeTree(c.Dir); err != nil {
		return fmt.Errorf("removing changeset %s: %w", c.Meta.ID, err)
	}
	return nil
}

// Trash takes the changeset out of the store at once, for EmptyTrash to
// delete: removing many files takes a while, and nobody need wait for it.
func (c *Changeset) Trash() error {
	trash := filepath.Join(filepath.Dir(filepath.Dir(c.Dir)), trashDir)
	if err := os.MkdirAll(trash, 0o700); err != nil {
		return fmt.Errorf("removing changeset %s: %w", c.Meta.ID, err)
	}
	dst := filepath.Join(trash, c.Meta.ID+"-"+strconv.FormatUint(rand.Uint64(), 36))
	if err := os.Rename(c.Dir, dst); err != nil {
		return fmt.Errorf("removing changeset %s: %w", c.Meta.ID, err)
	}
	return nil
}

// coolDown is how long the directories of a trashed changeset stay after
// its files are deleted: ext4 without a journal skips the inodes deleted
// in the last 60 to 360 seconds on every create in their block group, and
// the directories keep Orlov from choosing that group for the next
// changeset until then (see spread).
const coolDown = 6 * time.Minute

// dirsSuffix marks a trash entry whose files are gone; the Unix time of
// that follows it.
const dirsSuffix = ".dirs-"

// EmptyTrash deletes what Trash set aside, and reports whether there was
// anything. It deletes the files of each changeset at once and its
// directories once they have cooled down (coolDown), or at once with all.
func EmptyTrash(storeDir string, all bool) (bool, error) {
	dir := filepath.Join(storeDir, trashDir)
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		return false, nil
	}
	now := time.Now()
	var errs []error
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		name, since, cooling := strings.Cut(e.Name(), dirsSuffix)
		if cooling {
			t, perr := strconv.ParseInt(since, 10, 64)
			if !all && perr == nil && now.Sub(time.Unix(t, 0)) < coolDown {
				continue
			}
		} else if !all {
			if err := removeFiles(p); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := os.Rename(p, filepath.Join(dir, name+dirsSuffix+strconv.FormatInt(now.Unix(), 10))); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}

// removeFiles deletes everything under dir but directories.
func removeFiles(dir string) error {
	writable(dir)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
}

// writable makes every directory under dir writable and searchable.
func writable(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			chmodDir(p, 0o700)
			if err != nil {
				// Unreadable before the chmod: walk it now.
				filepath.WalkDir(p, func(q string, e fs.DirEntry, _ error) error {
					if e != nil && e.IsDir() {
						chmodDir(q, 0o700)
					}
					return nil
				})
			}
		}
		return nil
	})
}

// removeTree removes dir and everything in it, read-only directories
// included.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	// Make every directory writable and searchable, then try again.
	writable(dir)
	return os.RemoveAll(dir)
}

// BootID is this boot of the host ("" where the kernel does not say).
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// EarlierBoot reports whether a run wrote to the changeset during an
// earlier boot of the host: its writes were never synced (volatile
// overlays, an unsynced record), so a crash since may have left files
// empty or partly written, which nothing in the store tells apart from
// what the command wrote. A changeset recorded before boot ids were kept
// has none and is not reported.
func (m *Meta) EarlierBoot() bool {
	if m.BootID == "" {
		return false
	}
	now := BootID()
	return now != "" && now != m.BootID
}
