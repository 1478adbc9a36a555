package preflight

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pinfold/pinfold/internal/cgroup"
	"golang.org/x/sys/unix"
)

// The preflight cache is one line in <runDir>/preflight:
//
//	pinfold-preflight 1 <boot id> <euid> <unix time> <native 0|1> <controllers> <cgroup key>
//
// <controllers> is a bit set of the cgroup controllers found usable
// (memory 1, pids 2, cpu 4); <cgroup key> hashes /proc/self/cgroup for an
// ordinary user, whose limits depend on the cgroup pinfold starts in (a
// delegated "systemd-run --user --scope" or not), and is "-" for root.
// Only passes are recorded. A record is stale when the boot id or euid
// differ, or it is older than cacheTTL, so a sysctl changed without a
// reboot is noticed within that time.
const (
	cacheFile  = "preflight"
	cacheMagic = "pinfold-preflight 1"
	cacheTTL   = time.Hour
)

// preflightRuns counts preflights that missed the cache and checked the
// host; tests read it to tell a hit from a miss.
var preflightRuns atomic.Int64

// Run checks, before a sandbox spawn, what the native runtime
// needs: that this user can create the sandbox's namespaces (need.Native)
// and, when need.Limits, that cgroups can enforce the limits. It returns
// nil or a *Error naming the failed checks with their fixes.
//
// A pass is cached for the current boot and effective uid in
// /run/pinfold/preflight (root) or $XDG_RUNTIME_DIR/pinfold/preflight
// (others; no cache without XDG_RUNTIME_DIR), so that a later call costs
// two small file reads (three for an ordinary user asking for limits).
// Failures are not cached: a host fixed in the meantime passes at once.
func Run(ctx context.Context, need Needs) error {
	return run(ctx, need, NewHost())
}

// cacheRecord is the parsed cache line.
type cacheRecord struct {
	boot   string
	euid   int
	time   int64
	native bool
	ctrls  int
	cgkey  string
}

func (r *cacheRecord) String() string {
	n := "0"
	if r.native {
		n = "1"
	}
	return cacheMagic + " " + r.boot + " " + strconv.Itoa(r.euid) + " " + strconv.FormatInt(r.time, 10) + " " + n + " " +
		strconv.Itoa(r.ctrls) + " " + r.cgkey + "\n"
}

// Controller bits of cacheRecord.ctrls.
const (
	ctlMemory = 1 << iota
	ctlPids
	ctlCPU
)

func ctrlBits(l cgroup.Limits) int {
	if l.Zero() {
		return ctlMemory | ctlPids | ctlCPU
	}
	b := 0
	if l.MemoryBytes != 0 {
		b |= ctlMemory
	}
	if l.Pids != 0 {
		b |= ctlPids
	}
	if l.CPUs != 0 {
		b |= ctlCPU
	}
	return b
}

func run(ctx context.Context, need Needs, h *Host) error {
	if !need.Native && !need.Limits {
		return nil
	}
	want := 0
	if need.Limits {
		want = ctrlBits(need.Limit)
	}
	dir := h.RunDir(h.EUID)
	var boot, cgkey string
	var old cacheRecord
	oldOK := false
	now := time.Now().Unix()
	if dir != "" {
		var buf [64]byte
		if b, err := readInto(h.ProcSys+"/kernel/random/boot_id", buf[:]); err == nil {
			boot = strings.TrimSpace(string(b))
		}
		cgkey = "-"
		if need.Limits && h.EUID != 0 {
			b, err := ReadSmall(h.Proc + "/self/cgroup")
			if err != nil {
				boot = "" // cannot key limits: no cache
			}
			cgkey = hashKey(b)
		}
		if boot != "" {
			old, oldOK = readCache(dir+"/"+cacheFile, h.EUID)
			oldOK = oldOK && old.boot == boot && old.euid == h.EUID && now-old.time < int64(cacheTTL/time.Second) && old.time <= now+60
			if oldOK && (!need.Native || old.native) &&
				(want == 0 || old.ctrls&want == want && old.cgkey == cgkey) {
				return nil
			}
		}
	}
	preflightRuns.Add(1)

	var failed []Check
	if need.Native {
		if c := h.UsernsCheck(ctx); c.Status == Fail {
			failed = append(failed, c)
		}
	}
	if want != 0 {
		c, err := h.limitsCheck(need.Limit)
		if errors.Is(err, cgroup.ErrInvalid) {
			return err // not about the host
		}
		if c != nil {
			failed = append(failed, *c)
		}
	}
	if len(failed) > 0 {
		return &Error{Checks: failed}
	}
	if boot == "" {
		return nil
	}
	rec := cacheRecord{boot: boot, euid: h.EUID, time: now, native: need.Native, ctrls: want, cgkey: cgkey}
	if oldOK {
		rec.time = old.time
		rec.native = rec.native || old.native
		switch {
		case want == 0:
			rec.ctrls, rec.cgkey = old.ctrls, old.cgkey
		case old.cgkey == cgkey:
			rec.ctrls |= old.ctrls
		}
	}
	writeCache(dir, h.EUID, &rec)
	return nil
}

// limitsCheck checks that cgroups can enforce l (zero: memory, pids and
// cpu); it returns the failed check, or nil.
func (h *Host) limitsCheck(l cgroup.Limits) (*Check, error) {
	if l.Zero() {
		l = AllLimits
	}
	c := &Check{ID: "cgroup.controllers", Title: "cgroup controllers", Status: Fail}
	if h.EUID != 0 {
		c.ID, c.Title = "cgroup.delegation", "cgroup delegation"
	}
	sys, err := h.Cgroups()
	if err == nil {
		err = sys.Supports(l)
		if err == nil {
			return nil, nil
		}
	}
	c.Err = err
	c.Detail = "the limits asked for cannot be enforced as " + h.AsWho() + ": " + OneLine(err)
	switch {
	case h.EUID == 0:
		c.Fix = "mount the missing controllers, or drop --memory, --pids and --cpus"
	case sys != nil && sys.Version() == "v1":
		c.Fix = "run pinfold as root (cgroup v1 is not delegated to users), or drop --memory, --pids and --cpus"
	default:
		c.Fix = "run pinfold in a delegated cgroup: systemd-run --user --scope pinfold run ... (or drop --memory, --pids and --cpus)"
	}
	return c, err
}

// hashKey is the FNV-1a hash of b, in hex.
func hashKey(b []byte) string {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// readCache reads and parses the cache file; it must be a small regular
// file owned by euid.
func readCache(path string, euid int) (cacheRecord, bool) {
	var r cacheRecord
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return r, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != euid || st.Size > 256 {
		return r, false
	}
	var buf [256]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n == 0 || buf[n-1] != '\n' {
		return r, false
	}
	line, ok := strings.CutPrefix(string(buf[:n-1]), cacheMagic+" ")
	if !ok {
		return r, false
	}
	f := strings.Fields(line)
	if len(f) != 6 {
		return r, false
	}
	var e1, e2, e3 error
	r.boot = f[0]
	r.euid, e1 = strconv.Atoi(f[1])
	r.time, e2 = strconv.ParseInt(f[2], 10, 64)
	r.native = f[3] == "1"
	r.ctrls, e3 = strconv.Atoi(f[4])
	r.cgkey = f[5]
	return r, e1 == nil && e2 == nil && e3 == nil
}

// writeCache replaces the cache file atomically (a temporary file renamed
// over it). Failures are ignored: the cache only saves time.
func writeCache(dir string, euid int, r *cacheRecord) {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return
	}
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != euid || st.Mode&0o022 != 0 {
		return // not ours to write in
	}
	f, err := os.CreateTemp(dir, "."+cacheFile+"-*")
	if err != nil {
		return
	}
	_, err = f.WriteString(r.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), dir+"/"+cacheFile)
	}
	if err != nil {
		os.Remove(f.Name())
	}
}
