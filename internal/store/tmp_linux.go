package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// workName returns a new, unused path in tmp/, named
// <pid>-<starttime>-<random> after this process.
func (s *Store) workName() (string, error) {
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		return "", err
	}
	var rnd [8]byte
	if _, err := unix.Getrandom(rnd[:], 0); err != nil {
		return "", fmt.Errorf("getrandom: %w", err)
	}
	return s.dir + "/tmp/" + strconv.Itoa(pid) + "-" + strconv.FormatUint(start, 10) + "-" + hex.EncodeToString(rnd[:]), nil
}

// newWorkDir makes a work dir in tmp/.
func (s *Store) newWorkDir() (string, error) {
	dir, err := s.workName()
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// procStart returns the start time of process pid, in clock ticks after
// boot: field 22 of /proc/<pid>/stat.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Field 2 is the command in parentheses and may hold anything, so
	// count from the last ')'. Field 3 comes right after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return strconv.ParseUint(f[22-3], 10, 64)
}

// parseWorkName splits a work dir name into pid and start time.
func parseWorkName(name string) (pid int, start uint64, ok bool) {
	a, rest, ok1 := strings.Cut(name, "-")
	b, rnd, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 || !isHex(rnd) {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(a)
	st, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || p <= 0 {
		return 0, 0, false
	}
	return p, st, true
}

// alive reports whether the process pid that started at start still runs.
// When it cannot tell, it says yes.
func alive(pid int, start uint64) bool {
	got, err := procStart(pid)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist) && !errIs(err, unix.ESRCH)
	}
	return got == start
}

// CleanTmp removes the work dirs and files in tmp/ whose process has gone:
// it no longer runs, or its pid now belongs to a process that started at
// another time. It returns the paths it removed. Names it did not make are
// left alone.
func (s *Store) CleanTmp() ([]string, error) {
	dir := s.dir + "/tmp"
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cleaning store: %w", err)
	}
	if _, err := procStart(os.Getpid()); err != nil {
		return nil, fmt.Errorf("cleaning %s: cannot read process start times: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		pid, start, ok := parseWorkName(e.Name())
		if !ok || alive(pid, start) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("cleaning store: %w", err)
	}
	return removed, nil
}

// removeTree removes path and everything below it, also directories an
// archive made read-only, without following symlinks. What is mounted
// below it (a debootstrap that failed leaves its target's /proc, /sys and
// /dev/pts mounted) is unmounted first: removing through a mount would
// fail, or delete what the mount shows.
func removeTree(path string) error {
	if err := unmountBelow(path); err != nil {
		return err
	}
	err := os.RemoveAll(path)
	if err == nil {
		return nil
	}
	// Give the user back write and search permission on every directory
	// (WalkDir calls us on a directory before it reads it), then retry.
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = unix.Fchmodat(unix.AT_FDCWD, p, 0o700, 0)
		}
		return nil
	})
	return os.RemoveAll(path)
}

// unmountBelow detaches every mount at or below dir, deepest first, as
// /proc/self/mountinfo lists them.
func unmountBelow(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	// Deepest first: a mount's children go before it.
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errIs(err, unix.EINVAL) && !errIs(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
