package netstack

import (
	"bufio"
	"bytes"
	"os"

	"golang.org/x/sys/unix"
)

// released is what releaseBinary paged out, until restoreBinary (both
// called under the daemon's lock).
var released [][2]uintptr

// releaseBinary gives back the memory of the helper's own code and
// read-only data: it unmaps the pages of the binary's read-only mappings
// (MADV_DONTNEED: the next touch maps them again from the file), then
// drops the binary's pages that no process maps any more from the page
// cache (POSIX_FADV_DONTNEED), which any user may do. A page another
// process maps (a second helper of the same binary) stays where it is.
// The mappings are marked random first (MADV_RANDOM): a page the idle
// helper touches is read back alone, not with the megabytes of
// read-around that would put the whole binary back in the page cache.
func releaseBinary() {
	if inMemoryFS() {
		return // the file is the memory: unmapping it would free none
	}
	released = released[:0]
	for _, r := range binaryRanges() {
		madvise(r, unix.MADV_RANDOM)
		madvise(r, unix.MADV_DONTNEED)
		released = append(released, r)
	}
	if fd, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		unix.Close(fd)
	}
}

// inMemoryFS says the binary lives in tmpfs or ramfs, whose pages are
// the file itself and stay whoever maps them.
func inMemoryFS() bool {
	var st unix.Statfs_t
	if unix.Statfs("/proc/self/exe", &st) != nil {
		return true
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// restoreBinary undoes releaseBinary when a sandbox comes: read-around
// again, and the whole binary read back at once, in the background
// (MADV_WILLNEED starts the reads and does not wait), rather than a page
// at a time as the sandbox's first packets need them.
func restoreBinary() {
	for _, r := range released {
		madvise(r, unix.MADV_NORMAL)
		madvise(r, unix.MADV_WILLNEED)
	}
	released = nil
}

// madvise advises on a range of the binary's mappings, which are no Go
// memory: by address.
func madvise(r [2]uintptr, advice int) {
	unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], uintptr(advice))
}

// binaryRanges are the helper binary's read-only mappings (its code, and
// its read-only data with the function table); the writable data segment
// holds the process's own copies.
func binaryRanges() [][2]uintptr {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var rs [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fl := bytes.Fields(sc.Bytes())
		if len(fl) < 6 || string(fl[5]) != exe || bytes.IndexByte(fl[1], 'w') >= 0 {
			continue
		}
		lo, hi, ok := bytes.Cut(fl[0], []byte("-"))
		if start, end := hex(lo), hex(hi); ok && start > 0 && end > start {
			rs = append(rs, [2]uintptr{start, end})
		}
	}
	return rs
}

// hex parses an address of /proc/self/maps.
func hex(b []byte) uintptr {
	var v uintptr
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uintptr(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uintptr(c-'a'+10)
		default:
			return 0
		}
	}
	return v
}
