package cgroup

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ctrl is one of the controllers this package uses.
type ctrl uint8

const (
	ctrlMemory ctrl = iota
	ctrlPids
	ctrlCPU
	numCtrl
)

func (c ctrl) String() string {
	switch c {
	case ctrlMemory:
		return "memory"
	case ctrlPids:
		return "pids"
	case ctrlCPU:
		return "cpu"
	}
	return "unknown"
}

// ctrlByName returns the controller called name, as cgroupfs spells it in
// mount options, cgroup.controllers and cgroup.subtree_control.
func ctrlByName(name string) (ctrl, bool) {
	switch name {
	case "memory":
		return ctrlMemory, true
	case "pids":
		return ctrlPids, true
	case "cpu":
		return ctrlCPU, true
	}
	return 0, false
}

// ctrlSet is a set of controllers, one bit each.
type ctrlSet uint8

func (s ctrlSet) has(c ctrl) bool { return s&(1<<c) != 0 }

// String lists the set the way cgroup.controllers does.
func (s ctrlSet) String() string {
	var b []byte
	for c := range numCtrl {
		if s.has(c) {
			if b != nil {
				b = append(b, ' ')
			}
			b = append(b, c.String()...)
		}
	}
	return string(b)
}

// enableString is the cgroup.subtree_control request enabling s.
func (s ctrlSet) enableString() []byte {
	var b []byte
	for c := range numCtrl {
		if s.has(c) {
			if b != nil {
				b = append(b, ' ')
			}
			b = append(b, '+')
			b = append(b, c.String()...)
		}
	}
	return b
}

// parseCtrls reads a space-separated controller list, the format of
// cgroup.controllers and of reads of cgroup.subtree_control.
func parseCtrls(data []byte) ctrlSet {
	var s ctrlSet
	for _, f := range strings.Fields(string(data)) {
		if c, ok := ctrlByName(f); ok {
			s |= 1 << c
		}
	}
	return s
}

// needs is the set of controllers l uses.
func needs(l Limits) ctrlSet {
	var s ctrlSet
	if l.MemoryBytes != 0 {
		s |= 1 << ctrlMemory
	}
	if l.Pids != 0 {
		s |= 1 << ctrlPids
	}
	if l.CPUs != 0 {
		s |= 1 << ctrlCPU
	}
	return s
}

// parentName is the directory that holds pinfold's groups in each
// hierarchy.
const parentName = "pinfold"

// config holds the paths Detect reads and the file-system operations
// that tests replace to imitate cgroupfs in a temporary directory.
type config struct {
	// prefix is prepended to every mount point read from mountinfo.
	prefix     string
	mountinfo  string // default /proc/self/mountinfo
	selfCgroup string // default /proc/self/cgroup
	// writable returns nil when the caller may write path; default is
	// faccessat2 with AT_EACCESS. Tests run as root, where every path is
	// writable, and use it to play an unprivileged user.
	writable func(path string) error
	// mkdir creates a cgroup directory and rmdir removes one; tests
	// imitate cgroupfs, which makes and drops the interface files.
	mkdir, rmdir func(dir string) error
}

// System is where this host keeps the memory, pids and cpu controllers.
// Its methods may be called from several goroutines.
type System struct {
	cfg config
	// v1 is the mount point of the v1 hierarchy holding each controller,
	// or "".
	v1 [numCtrl]string
	// v2 is the cgroup2 mount point, or "", and v2Root the cgroup of that
	// mount's root within the hierarchy (field 4 of mountinfo).
	v2, v2Root string
	// v2Has are the controllers in the cgroup2 root's cgroup.controllers.
	// It is read only when some controller has no v1 hierarchy.
	v2Has ctrlSet

	baseOnce sync.Once
	base     string // directory holding the v2 "pinfold" parent
	baseErr  error
}

// Detect finds the cgroup hierarchies of this process's mount namespace.
func Detect() (*System, error) {
	return detect(config{})
}

func detect(cfg config) (*System, error) {
	if cfg.mountinfo == "" {
		cfg.mountinfo = "/proc/self/mountinfo"
	}
	if cfg.selfCgroup == "" {
		cfg.selfCgroup = "/proc/self/cgroup"
	}
	if cfg.writable == nil {
		cfg.writable = func(path string) error { return access(path, unix.W_OK) }
	}
	if cfg.mkdir == nil {
		cfg.mkdir = mkdir
	}
	if cfg.rmdir == nil {
		cfg.rmdir = unix.Rmdir
	}
	data, err := readFile(cfg.mountinfo, 8192)
	if err != nil {
		return nil, fmt.Errorf("detecting cgroups: %w", err)
	}
	m := parseMountinfo(string(data))
	s := &System{cfg: cfg}
	complete := true
	for c, p := range m.v1 {
		if p != "" {
			s.v1[c] = cfg.prefix + p
		} else {
			complete = false
		}
	}
	if m.v2 != "" {
		s.v2, s.v2Root = cfg.prefix+m.v2, m.v2Root
		if !complete {
			b, err := readFile(s.v2+"/cgroup.controllers", 128)
			if err != nil {
				return nil, fmt.Errorf("detecting cgroups: %w", err)
			}
			s.v2Has = parseCtrls(b)
		}
	}
	return s, nil
}

// onV2 reports whether controller c lives in the cgroup2 tree. A
// controller bound to a v1 hierarchy is never listed by cgroup2.
func (s *System) onV2(c ctrl) bool {
	return s.v1[c] == "" && s.v2Has.has(c)
}

// Version says where the memory, pids and cpu controllers live: "v1" when
// all available ones are on cgroup v1 hierarchies (even if a cgroup2 tree
// is mounted for other uses, as on systemd hybrid hosts), "v2" when all
// are in the cgroup2 tree, "hybrid" when some are in each, and "none"
// when none of them is available.
func (s *System) Version() string {
	var n1, n2 int
	for c := range numCtrl {
		switch {
		case s.v1[c] != "":
			n1++
		case s.onV2(c):
			n2++
		}
	}
	switch {
	case n1 > 0 && n2 > 0:
		return "hybrid"
	case n1 > 0:
		return "v1"
	case n2 > 0:
		return "v2"
	}
	return "none"
}

// Supports reports whether New can apply l here: nil, or an error
// wrapping ErrInvalid (bad limits) or ErrUnsupported, naming each
// missing controller, why it is unusable and how to fix that. It checks
// permissions, delegation and the v2 rule against processes in inner
// cgroups, which New does not check in advance.
func (s *System) Supports(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	var errs []error
	var v2 ctrlSet
	for c := range numCtrl {
		if !needs(l).has(c) {
			continue
		}
		switch {
		case s.v1[c] != "":
			if err := s.checkV1(c); err != nil {
				errs = append(errs, err)
			}
		case s.onV2(c):
			v2 |= 1 << c
		default:
			errs = append(errs, s.missing(c))
		}
	}
	if v2 != 0 {
		if err := s.checkV2(v2); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// missing explains why controller c is available nowhere.
func (s *System) missing(c ctrl) error {
	if s.v2 == "" {
		return fmt.Errorf("%w: %s controller: no cgroup v1 hierarchy mounts it and no cgroup2 file system is mounted", ErrUnsupported, c)
	}
	return fmt.Errorf("%w: %s controller: no cgroup v1 hierarchy mounts it and the cgroup2 root %s does not list it in cgroup.controllers", ErrUnsupported, c, s.v2)
}

func (s *System) checkV1(c ctrl) error {
	m := s.v1[c]
	dir := m + "/" + parentName
	err := s.cfg.writable(dir)
	if err == unix.ENOENT {
		dir = m
		err = s.cfg.writable(dir)
	}
	switch {
	case err == nil:
		return nil
	case err == unix.EROFS:
		return fmt.Errorf("%w: %s controller: the cgroup v1 hierarchy %s is mounted read-only", ErrUnsupported, c, m)
	}
	return fmt.Errorf("%w: %s controller: cannot write the cgroup v1 hierarchy at %s (%w); run pinfold as root", ErrUnsupported, c, dir, err)
}

// checkV2 checks that the controllers in set can be used in the v2 base.
func (s *System) checkV2(set ctrlSet) error {
	base, err := s.v2Base()
	if err != nil {
		return err
	}
	offered := s.v2Has
	if base != s.v2 {
		b, err := readFile(base+"/cgroup.controllers", 128)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		offered = parseCtrls(b)
	}
	if miss := set &^ offered; miss != 0 {
		return fmt.Errorf("%w: cgroup2 %s does not offer the %s controller: enable it in the cgroup.subtree_control of its parent (with systemd: Delegate=%s)", ErrUnsupported, base, miss, miss)
	}
	// Enabling a controller for children needs a cgroup without
	// processes, except at the root of the hierarchy.
	for _, dir := range []string{base, base + "/" + parentName} {
		b, err := readFile(dir+"/cgroup.subtree_control", 128)
		if errors.Is(err, unix.ENOENT) && dir != base {
			break // New creates it empty
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		off := set &^ parseCtrls(b)
		if off == 0 || s.isV2Root(dir) {
			continue
		}
		if err := s.cfg.writable(dir + "/cgroup.subtree_control"); err != nil {
			return fmt.Errorf("%w: cannot enable the %s controller in %s/cgroup.subtree_control (%w); run pinfold as root", ErrUnsupported, off, dir, err)
		}
		procs, err := readFile(dir+"/cgroup.procs", 512)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		if hasPids(procs) {
			return fmt.Errorf("%w: cannot enable the %s controller in %s/cgroup.subtree_control: that cgroup has processes of its own, and cgroup v2 enables controllers only below cgroups without processes; move its processes into a leaf cgroup first", ErrUnsupported, off, dir)
		}
	}
	return nil
}

// isV2Root reports whether dir is the root of the whole cgroup2
// hierarchy, which alone has no cgroup.type file. Inside a cgroup
// namespace the mount root is not the hierarchy root.
func (s *System) isV2Root(dir string) bool {
	return access(dir+"/cgroup.type", unix.F_OK) == unix.ENOENT
}

// v2Base returns the directory under which the v2 "pinfold" parent lives:
// the cgroup2 root when it is writable, else the parent of this process's
// own cgroup when that parent is delegated to this user. See the package
// documentation.
func (s *System) v2Base() (string, error) {
	s.baseOnce.Do(func() { s.base, s.baseErr = s.findV2Base() })
	return s.base, s.baseErr
}

func (s *System) findV2Base() (string, error) {
	if s.v2 == "" {
		return "", fmt.Errorf("%w: no cgroup2 file system is mounted", ErrUnsupported)
	}
	rootErr := s.cfg.writable(s.v2)
	if rootErr == nil {
		return s.v2, nil
	}
	own, err := s.ownCgroup()
	if err != nil {
		return "", fmt.Errorf("%w: cannot write the cgroup2 root %s (%w), and %w; run pinfold as root", ErrUnsupported, s.v2, rootErr, err)
	}
	if own == s.v2 {
		return "", fmt.Errorf("%w: cannot write the cgroup2 root %s (%w), and this process is in that root, not in a delegated cgroup; run pinfold as root", ErrUnsupported, s.v2, rootErr)
	}
	parent := own[:strings.LastIndexByte(own, '/')]
	if len(parent) > len(s.v2) &&
		s.cfg.writable(parent) == nil &&
		s.cfg.writable(parent+"/cgroup.subtree_control") == nil &&
		s.cfg.writable(parent+"/cgroup.procs") == nil {
		return parent, nil
	}
	return "", fmt.Errorf("%w: cannot write the cgroup2 root %s (%w), and %s, the parent of this process's cgroup, is not delegated to this user; run pinfold as root, or in a cgroup whose parent is delegated (for example through systemd-run --user --scope)", ErrUnsupported, s.v2, rootErr, parent)
}

// ownCgroup returns the directory of this process's cgroup2 group, from
// the "0::/path" line of /proc/self/cgroup.
func (s *System) ownCgroup() (string, error) {
	b, err := readFile(s.cfg.selfCgroup, 1024)
	if err != nil {
		return "", err
	}
	rest := string(b)
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		// p is relative to the cgroup namespace, like v2Root.
		root := strings.TrimSuffix(s.v2Root, "/")
		if !strings.HasPrefix(p, "/") || p != root && !strings.HasPrefix(p, root+"/") {
			return "", fmt.Errorf("this process's cgroup %s is outside the cgroup2 mount", p)
		}
		return strings.TrimSuffix(s.v2+p[len(root):], "/"), nil
	}
	return "", fmt.Errorf("%s has no cgroup2 entry", s.cfg.selfCgroup)
}

// cgroupMounts are the cgroup file systems found in mountinfo, with mount
// points as the kernel escapes them undone.
type cgroupMounts struct {
	v1         [numCtrl]string
	v2, v2Root string
}

// mountLine holds the fields of one mountinfo line that matter here.
type mountLine struct {
	id, parent, root, point, fstype, super string
}

// parseMountinfo finds the mount point of the v1 hierarchy of each
// controller, and of the cgroup2 tree, in the text of
// /proc/<pid>/mountinfo (see proc_pid_mountinfo(5)). A mount that another
// mount covers at the same mount point is skipped; of several visible
// mounts of a hierarchy the first listed wins.
func parseMountinfo(data string) cgroupMounts {
	var lines []mountLine
	for data != "" {
		var line string
		line, data, _ = strings.Cut(data, "\n")
		if m, ok := parseMountLine(line); ok {
			lines = append(lines, m)
		}
	}
	covered := func(m mountLine) bool {
		for _, o := range lines {
			if o.parent == m.id && o.point == m.point {
				return true
			}
		}
		return false
	}
	var r cgroupMounts
	for _, m := range lines {
		switch m.fstype {
		case "cgroup":
			if covered(m) {
				continue
			}
			for opts := m.super; opts != ""; {
				var o string
				o, opts, _ = strings.Cut(opts, ",")
				if c, ok := ctrlByName(o); ok && r.v1[c] == "" {
					r.v1[c] = unescapeMount(m.point)
				}
			}
		case "cgroup2":
			if r.v2 == "" && !covered(m) {
				r.v2, r.v2Root = unescapeMount(m.point), unescapeMount(m.root)
			}
		}
	}
	return r
}

// parseMountLine splits one mountinfo line:
//
//	36 35 98:0 /root /mnt rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// The optional fields before the "-" vary in number.
func parseMountLine(line string) (mountLine, bool) {
	var f [6]string
	for i := range f {
		f[i], line, _ = strings.Cut(line, " ")
	}
	for {
		var opt string
		var more bool
		opt, line, more = strings.Cut(line, " ")
		if opt == "-" {
			break
		}
		if !more {
			return mountLine{}, false
		}
	}
	m := mountLine{id: f[0], parent: f[1], root: f[3], point: f[4]}
	m.fstype, line, _ = strings.Cut(line, " ")
	_, line, _ = strings.Cut(line, " ") // mount source
	m.super, _, _ = strings.Cut(line, " ")
	return m, m.point != ""
}

// unescapeMount undoes the octal escapes (\040 for space, \011, \012,
// \134) the kernel writes into mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b = append(b, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
