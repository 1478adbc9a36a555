package native

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A launch record lets the next identical `pinfold run` start without the
// Go runtime: initc/launch.c, linked in as the binary's entry point, finds
// it by the hash of its key, checks every dependency, and replays the
// messages. The numbers below mirror initc/launch.h.
const (
	launchMagic      = "PFLAUNCH"
	launchVersion    = 1
	launchKeyMagic   = "pinfold-launch-1\x00"
	launchMaxRecord  = 4 << 20
	rKey, rDep       = 1, 2
	rEmpty, rSpawn   = 3, 4
	rConfig, rExec   = 5, 6
	rWait, rOpts     = 7, 8
	rChangeset       = 9
	rNet             = 10
	rCgroup          = 11
	launchAnyCommand = 1
	launchStdin      = 2
)

// DepKind is how a launch record checks one path.
type DepKind uint32

// Dependency kinds (DEP_* in initc/launch.h).
const (
	DepStat   DepKind = 1 // stat(2) of the path is unchanged
	DepLstat  DepKind = 2 // lstat(2) of the path is unchanged
	DepAbsent DepKind = 3 // the path does not exist
	DepLink   DepKind = 4 // the symbolic link still points at Target
	// DepLabsent: nothing, not even a dangling symbolic link, is at the path.
	DepLabsent DepKind = 5
	// DepAttr and DepLattr compare type, mode and owner only, for paths
	// whose times change without changing the plan (a workspace, /etc).
	DepAttr  DepKind = 6
	DepLattr DepKind = 7
)

// Dep is one thing a launch record depends on.
type Dep struct {
	Kind   DepKind
	Path   string
	Target string      // DepLink
	Stat   unix.Stat_t // DepStat, DepLstat
}

// StatDep reads what a dependency of kind on path is now. A path that is
// missing makes a DepAbsent dependency (DepLabsent for the kinds that do
// not follow a final symbolic link). Reading a dependency again with its
// own kind tells whether it still holds.
func StatDep(kind DepKind, path string) (Dep, error) {
	d := Dep{Kind: kind, Path: path}
	var err error
	switch kind {
	case DepLink:
		d.Target, err = os.Readlink(path)
		return d, err
	case DepLstat, DepLattr, DepLabsent:
		err = unix.Lstat(path, &d.Stat)
	default:
		err = unix.Stat(path, &d.Stat)
	}
	if kind == DepAttr || kind == DepLattr {
		d.Stat = unix.Stat_t{Mode: d.Stat.Mode, Uid: d.Stat.Uid, Gid: d.Stat.Gid}
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		if kind == DepLstat || kind == DepLattr || kind == DepLabsent {
			return Dep{Kind: DepLabsent, Path: path}, nil
		}
		return Dep{Kind: DepAbsent, Path: path}, nil
	}
	return d, err
}

// Same reports whether two reads of a dependency agree.
func (d Dep) Same(e Dep) bool {
	if d.Kind != e.Kind || d.Path != e.Path || d.Target != e.Target {
		return false
	}
	a, b := &d.Stat, &e.Stat
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid &&
		a.Size == b.Size && a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// Changed is the dependency's last change (ctime) when the record relies
// on its times, or the zero time.
func (d Dep) Changed() time.Time {
	if d.Kind != DepStat && d.Kind != DepLstat {
		return time.Time{}
	}
	return time.Unix(d.Stat.Ctim.Sec, d.Stat.Ctim.Nsec)
}

// LaunchRecord is what replaying a run needs.
type LaunchRecord struct {
	// Prefix is the command line up to and including the first "--"
	// (without the program name); Cwd, Environ and the ids complete the
	// key (see LaunchKey).
	Prefix  []string
	Cwd     string
	Environ []string
	Deps    []Dep
	// Empty are directories that must be empty or absent (pending work
	// that only the Go side does).
	Empty []string
	// Spawn, Config and Exec are the messages sent to the init.
	Spawn, Config, Exec []byte
	// AnyCommand lets any command replace Exec's arguments: the plan
	// does not depend on the command.
	AnyCommand bool
	Stdin      bool // pass stdin rather than /dev/null
	Timeout    time.Duration
	TimeoutMsg string
	TmpFullMsg string
	// Changeset, when set, makes every replay create a new changeset of
	// one directory as the recorded run did (see LaunchChangeset).
	Changeset *LaunchChangeset
	// Net, when set, makes every replay connect to the shared network
	// helper as the recorded run did (see LaunchNet).
	Net *LaunchNet
	// Cgroup, when set, makes every replay make and join cgroups with the
	// recorded run's limits (see LaunchCgroup).
	Cgroup *LaunchCgroup
}

// LaunchCgroup is how a replay puts its sandbox under the recorded run's
// limits: launch.c makes one group named "<pid>-<start time>-1" (its own
// pid and start time, as the Go side names its groups: pinfold clean
// knows when they are stale) in each of Parents, writes Writes into them
// in order, writes the sandbox init's pid into each cgroup.procs while
// the init builds the root, and sends the command only once all that
// succeeded; on any failure it removes what it made and leaves the run
// to the Go side. The waiter then reports the limits hit from the event
// files with the messages, and removes the groups, as after the Go
// side's hand-off (WaitLimits). The Config message of such a record has
// no C_CGROUP records (StripCgroups).
type LaunchCgroup struct {
	Parents []string
	Writes  []CgroupWrite
	// MemoryEvents and PidsEvents name the event files (a file in the
	// group's directory of that index); File "" for none.
	MemoryEvents, PidsEvents   CgroupFile
	OOMMsg, MemoryMsg, PidsMsg string
}

// CgroupFile is a file in one of a LaunchCgroup's groups.
type CgroupFile struct {
	Dir  int // index in Parents
	File string
}

// CgroupWrite is one value written into a group's file (cgroup.Write).
type CgroupWrite struct {
	CgroupFile
	Value string
	// Optional: a missing file (ENOENT) is not an error.
	Optional bool
}

// maxLaunchCgroups is MAXCG in initc/init.c: the waiter takes that many.
const maxLaunchCgroups = 8

// encode returns R_CGROUP's data: NUL-terminated strings, each entry's
// first string led by its kind and (but "d") the group's index as one
// digit: "d" PARENT; "w" or "o" (optional) I FILE, VALUE; "m" I FILE,
// OOMMSG, MEMMSG; "p" I FILE, PIDSMSG.
func (c *LaunchCgroup) encode() ([]byte, error) {
	if len(c.Parents) == 0 || len(c.Parents) > maxLaunchCgroups {
		return nil, errors.New("launch record: bad number of cgroups")
	}
	var b []byte
	strs := func(ss ...string) {
		for _, s := range ss {
			b = append(append(b, s...), 0)
		}
	}
	file := func(kind byte, f CgroupFile) error {
		if f.Dir < 0 || f.Dir >= len(c.Parents) || f.File == "" || strings.ContainsAny(f.File, "/\x00") {
			return errors.New("launch record: bad cgroup file")
		}
		b = append(b, kind, byte('0'+f.Dir))
		strs(f.File)
		return nil
	}
	for _, p := range c.Parents {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return nil, errors.New("launch record: bad cgroup parent")
		}
		b = append(b, 'd')
		strs(p)
	}
	for _, w := range c.Writes {
		kind := byte('w')
		if w.Optional {
			kind = 'o'
		}
		if err := file(kind, w.CgroupFile); err != nil {
			return nil, err
		}
		strs(w.Value)
	}
	if c.MemoryEvents.File != "" {
		if err := file('m', c.MemoryEvents); err != nil {
			return nil, err
		}
		strs(c.OOMMsg, c.MemoryMsg)
	}
	if c.PidsEvents.File != "" {
		if err := file('p', c.PidsEvents); err != nil {
			return nil, err
		}
		strs(c.PidsMsg)
	}
	return b, nil
}

// StripCgroups returns the M_CONFIG message cfg without its C_CGROUP
// records: a replay joins the init to its cgroups itself (LaunchCgroup).
func StripCgroups(cfg []byte) ([]byte, error) { return strip(cfg, msgConfig, cCgroup) }

// StripCgroupSelf returns the M_SPAWN message spawn without its C_CGSELF
// records, which name the recording run's groups: a replay adds its own.
func StripCgroupSelf(spawn []byte) ([]byte, error) { return strip(spawn, msgSpawn, cCgroupSelf) }

// strip returns msg, a message of type typ, without its records of type
// rec.
func strip(msg []byte, typ uint32, rec uint16) ([]byte, error) {
	if len(msg) < 8 || binary.NativeEndian.Uint32(msg) != typ {
		return nil, fmt.Errorf("not a message of type %d", typ)
	}
	out := append([]byte(nil), msg[:8]...)
	for p := msg[8:]; len(p) > 0; {
		if len(p) < 8 {
			return nil, errors.New("truncated message")
		}
		n := 8 + int(binary.NativeEndian.Uint32(p[4:]))
		n = (n + 3) &^ 3
		if n > len(p) {
			n = len(p) // the last record's padding
		}
		if binary.NativeEndian.Uint16(p) != rec {
			out = append(out, p[:n]...)
		}
		p = p[n:]
	}
	binary.NativeEndian.PutUint32(out[4:], uint32(len(out)-8))
	return out, nil
}

// LaunchNet is how a replay gets its network stack: launch.c connects to
// the shared helper's socket Sock (a replay without one, the helper
// having exited, is left to the Go side), sends Config, passes on the
// sandbox's TUN device when the init sends it, and before it becomes the
// waiter hands the run off (netpolicy.Report: its stderr, and a new log
// in Runs).
type LaunchNet struct {
	Sock   string
	Runs   string
	Config []byte
}

// LaunchChangeset is how a replay makes the run's changeset: launch.c
// creates <Store>/changesets/<new id>/{r0/upper,r0/work,lock,meta.json},
// writes the new id over the recorded one at IDOffsets in the M_CONFIG
// message, and hands the waiter Exe, Store and the id to finish it with.
type LaunchChangeset struct {
	IDOffsets []uint32
	// UID and GID own r0, its upper and its work directory.
	UID, GID uint32
	// UpperMode is the upper directory's mode (permissions and sticky bit,
	// as chmod(2) takes them): the workspace's, as the merged root shows.
	UpperMode uint32
	Store     string
	Exe       string
	// MetaTail is meta.json after its "command" array: from the comma
	// before "workspace" to the end.
	MetaTail string
}

// ChangesetIDLen is the length of a changeset id (CHANGESET_ID_LEN).
const ChangesetIDLen = 12

// LaunchKey is the exact key a record is stored under; launch.c builds the
// same bytes from its argv, cwd, environment, ids and the boot id.
func LaunchKey(prefix []string, cwd string, environ []string) ([]byte, error) {
	boot, err := BootID()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(launchKeyMagic)
	str := func(tag byte, s string) {
		b.WriteByte(tag)
		b.WriteString(s)
		b.WriteByte(0)
	}
	for _, a := range prefix {
		str('a', a)
	}
	str('c', cwd)
	for _, e := range environ {
		if e != "" {
			str('e', e)
		}
	}
	b.WriteByte('u')
	for _, id := range []int{os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid()} {
		b.Write(binary.NativeEndian.AppendUint32(nil, uint32(id)))
	}
	str('b', boot)
	return b.Bytes(), nil
}

// ReadFileRaw reads the start of the small file at path into b with
// plain system calls: os.ReadFile's registration of the file with the
// runtime's poller costs a first run's path more than the read.
func ReadFileRaw(path string, b []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return unix.Read(fd, b)
}

var bootID struct {
	sync.Once
	id  string
	err error
}

// BootID returns the kernel's boot id, read once: launch keys end with it.
// (Read with plain system calls: os.ReadFile's registration of the file
// with the runtime's poller costs a first run's hand-off as much again.)
func BootID() (string, error) {
	bootID.Do(func() {
		var b [40]byte
		n, err := ReadFileRaw("/proc/sys/kernel/random/boot_id", b[:])
		if err == nil && n < 36 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			bootID.err = fmt.Errorf("reading the boot id: %w", err)
			return
		}
		bootID.id = string(b[:36])
	})
	return bootID.id, bootID.err
}

// FNV-1a offset bases: the file name hashes the key with the first; the
// record holds the key's length and both hashes, never the key itself
// (it holds the environment).
const fnvBasis, fnvBasis2 = 0xcbf29ce484222325, 0x84222325cbf29ce4

func fnv1a(h uint64, b []byte) uint64 {
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return h
}

// LaunchFile is the record file for key under dir.
func LaunchFile(dir string, key []byte) string {
	return filepath.Join(dir, fmt.Sprintf("%016x", fnv1a(fnvBasis, key)))
}

// encode returns the record's key and the record file's bytes.
func (r *LaunchRecord) encode() (key, b []byte, err error) {
	key, err = LaunchKey(r.Prefix, r.Cwd, r.Environ)
	if err != nil {
		return nil, nil, err
	}
	b = append([]byte(launchMagic), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.NativeEndian.PutUint32(b[8:], launchVersion)
	rec := func(tag uint16, data []byte) {
		var h [8]byte
		binary.NativeEndian.PutUint16(h[0:], tag)
		binary.NativeEndian.PutUint32(h[4:], uint32(len(data)))
		b = append(b, h[:]...)
		b = append(b, data...)
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
	}
	var digest [24]byte
	binary.NativeEndian.PutUint64(digest[0:], uint64(len(key)))
	binary.NativeEndian.PutUint64(digest[8:], fnv1a(fnvBasis, key))
	binary.NativeEndian.PutUint64(digest[16:], fnv1a(fnvBasis2, key))
	rec(rKey, digest[:])
	for _, d := range r.Deps {
		v := make([]byte, 80, 80+len(d.Path)+len(d.Target)+2)
		binary.NativeEndian.PutUint32(v[0:], uint32(d.Kind))
		s := &d.Stat
		binary.NativeEndian.PutUint64(v[8:], s.Dev)
		binary.NativeEndian.PutUint64(v[16:], s.Ino)
		binary.NativeEndian.PutUint32(v[24:], s.Mode)
		binary.NativeEndian.PutUint32(v[28:], s.Uid)
		binary.NativeEndian.PutUint32(v[32:], s.Gid)
		for i, x := range []int64{s.Size, s.Mtim.Sec, s.Mtim.Nsec, s.Ctim.Sec, s.Ctim.Nsec} {
			binary.NativeEndian.PutUint64(v[40+8*i:], uint64(x))
		}
		v = append(append(v, d.Path...), 0)
		if d.Kind == DepLink {
			v = append(append(v, d.Target...), 0)
		}
		rec(rDep, v)
	}
	for _, e := range r.Empty {
		rec(rEmpty, append([]byte(e), 0))
	}
	rec(rSpawn, r.Spawn)
	rec(rConfig, r.Config)
	rec(rExec, r.Exec)
	rec(rWait, []byte(r.TimeoutMsg+"\x00"+r.TmpFullMsg+"\x00"))
	var opts [16]byte
	var flags uint32
	if r.AnyCommand {
		flags |= launchAnyCommand
	}
	if r.Stdin {
		flags |= launchStdin
	}
	binary.NativeEndian.PutUint32(opts[0:], flags)
	binary.NativeEndian.PutUint64(opts[8:], uint64(r.Timeout))
	rec(rOpts, opts[:])
	if c := r.Changeset; c != nil {
		v := make([]byte, 16, 16+4*len(c.IDOffsets)+len(c.Store)+len(c.Exe)+len(c.MetaTail)+3)
		binary.NativeEndian.PutUint32(v, uint32(len(c.IDOffsets)))
		binary.NativeEndian.PutUint32(v[4:], c.UID)
		binary.NativeEndian.PutUint32(v[8:], c.GID)
		binary.NativeEndian.PutUint32(v[12:], c.UpperMode)
		for _, o := range c.IDOffsets {
			v = binary.NativeEndian.AppendUint32(v, o)
		}
		for _, str := range []string{c.Store, c.Exe, c.MetaTail} {
			v = append(append(v, str...), 0)
		}
		rec(rChangeset, v)
	}
	if n := r.Net; n != nil {
		rec(rNet, append([]byte(n.Sock+"\x00"+n.Runs+"\x00"), n.Config...))
	}
	if c := r.Cgroup; c != nil {
		v, err := c.encode()
		if err != nil {
			return nil, nil, err
		}
		rec(rCgroup, v)
	}
	if len(b) > launchMaxRecord {
		return nil, nil, ErrTooLarge
	}
	return key, b, nil
}

// WriteLaunch stores r in dir (created 0700), replacing any record with
// the same key.
func WriteLaunch(dir string, r *LaunchRecord) error {
	key, data, err := r.encode()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return replaceFile(LaunchFile(dir, key), data)
}

// replaceFile writes data to path, mode 0600, through a temporary file
// renamed over it. (With plain system calls: os.WriteFile registers the
// file with the runtime's poller, four more calls on a first run's
// hand-off.)
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	for b := data; len(b) > 0 && err == nil; {
		var n int
		if n, err = unix.Write(fd, b); err == nil {
			b = b[n:]
		}
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		unix.Unlink(tmp)
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// TrimLaunches keeps dir, a store's launch records, at most maxLaunches
// (see trimLaunches). WriteLaunch does not: a first run trims while its
// command starts, before it writes its record.
func TrimLaunches(dir string) { trimLaunches(dir, maxLaunches) }

// maxLaunches bounds the records kept: each distinct command line,
// directory and environment has its own.
const maxLaunches = 256

// trimLaunches removes the least recently written records once dir holds
// more than keep, down to three quarters of keep. Every first run writes a
// record, and reading each record's time takes 0.5 ms at 256 of them
// against 0.1 ms for the names alone: the slack makes that a cost of one
// write in keep/4, not of every write once the directory is full.
func trimLaunches(dir string, keep int) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil || len(names) <= keep {
		return
	}
	type rec struct {
		name string
		mod  time.Time
	}
	var recs []rec
	for _, n := range names {
		if strings.Contains(n, ".tmp") {
			continue // being written
		}
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			recs = append(recs, rec{n, fi.ModTime()})
		}
	}
	slices.SortFunc(recs, func(a, b rec) int { return a.mod.Compare(b.mod) })
	for _, r := range recs[:max(0, len(recs)-(keep-keep/4))] {
		os.Remove(filepath.Join(dir, r.name))
	}
}

// RemoveLaunches deletes every record in dir and reports how many.
func RemoveLaunches(dir string) int {
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}

// maxSpawnHint is launch.h's LAUNCH_MAX_SPAWN.
const maxSpawnHint = 4096

// SpawnHintFile is a store's spawn hint: the last first run's M_SPAWN,
// from which the launcher pre-spawns the next first run's init
// (initc/launch.c: pre_spawn). A traced run (the variable PINFOLD_TRACE
// set) sends C_TRACE, and has a hint of its own.
func SpawnHintFile(store string, trace bool) string {
	if trace {
		return filepath.Join(store, "spawn-hint.trace")
	}
	return filepath.Join(store, "spawn-hint")
}

// WriteSpawnHint stores msg (an M_SPAWN message) as the store's hint
// unless it holds it already: every first run would otherwise rewrite the
// same bytes.
func WriteSpawnHint(store string, trace bool, msg []byte) error {
	if len(msg) == 0 || len(msg) > maxSpawnHint {
		return nil
	}
	path := SpawnHintFile(store, trace)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, msg) {
		return nil
	}
	return replaceFile(path, msg)
}

// maxConfigHint is launch.h's LAUNCH_MAX_CONFIG_HINT.
const maxConfigHint = 64 * 1024

// ConfigHintFile is the config hint of a command line's flags (prefix:
// os.Args[1:] through "--", as a launch record's key has them) in the
// directory cwd: the M_SPAWN and M_CONFIG messages of the last run of
// them there, from which the launcher pre-spawns the next first run's
// init with its config, so that the init builds the root while the Go
// runtime starts (initc/launch.c: pre_spawn). It is <store>/hints/HASH,
// named by a hash of the head of the launch key: the command and the
// environment are not in it, so a new command line with the same flags in
// the same directory finds it. A traced run (C_TRACE in its M_SPAWN) has
// hints of its own (HASH.trace).
func ConfigHintFile(store string, trace bool, prefix []string, cwd string) string {
	var b bytes.Buffer
	b.WriteString(launchKeyMagic)
	for _, a := range prefix {
		b.WriteByte('a')
		b.WriteString(a)
		b.WriteByte(0)
	}
	b.WriteByte('c')
	b.WriteString(cwd)
	b.WriteByte(0)
	name := fmt.Sprintf("%016x", fnv1a(fnvBasis, b.Bytes()))
	if trace {
		name += ".trace"
	}
	return filepath.Join(store, "hints", name)
}

// WriteConfigHint stores spawn and config (an M_SPAWN and an M_CONFIG
// message) as the config hint of prefix in cwd (ConfigHintFile), unless it
// holds them already. The caller writes one only for a config that names
// nothing of one run's own (no changeset, capture, cgroup or network
// device: the root it builds is the next run's), since the init acts on it
// before the Go side has checked it.
func WriteConfigHint(store string, trace bool, prefix []string, cwd string, spawn, config []byte) error {
	if len(spawn) == 0 || len(spawn) > maxSpawnHint || len(config) == 0 || len(config) > maxConfigHint {
		return nil
	}
	path := ConfigHintFile(store, trace, prefix, cwd)
	msg := append(slices.Clip(spawn), config...)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, msg) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := replaceFile(path, msg); err != nil {
		return err
	}
	trimLaunches(filepath.Dir(path), maxLaunches)
	return nil
}

// splitHint splits the messages the launcher sent a pre-spawned init (an
// M_SPAWN message, then an M_CONFIG message or nothing) into the two.
func splitHint(b []byte) (spawn, config []byte) {
	n := msgLen(b, msgSpawn)
	if n == 0 {
		return b, nil
	}
	if rest := b[n:]; len(rest) > 0 && msgLen(rest, msgConfig) == len(rest) {
		return b[:n:n], rest
	}
	return b, nil
}

// msgLen is the length of the message of type typ at the start of b, or 0.
func msgLen(b []byte, typ uint32) int {
	if len(b) < 8 || binary.NativeEndian.Uint32(b) != typ {
		return 0
	}
	n := 8 + int(binary.NativeEndian.Uint32(b[4:]))
	if n > len(b) {
		return 0
	}
	return n
}

// RemoveSpawnHints deletes the store's spawn and config hints (pinfold
// clean).
func RemoveSpawnHints(store string) {
	os.RemoveAll(filepath.Join(store, "hints"))
	os.Remove(SpawnHintFile(store, false))
	os.Remove(SpawnHintFile(store, true))
	// And a writer's temporary file, left by one that died before its
	// rename.
	tmps, _ := filepath.Glob(filepath.Join(store, "spawn-hint*.tmp*"))
	for _, t := range tmps {
		os.Remove(t)
	}
}
