package netstack

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pssFile is the process's PSS of file pages, in KiB.
func pssFile(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss_File:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no Pss_File in smaps_rollup (kernel before 5.13)")
	return 0
}

// cached is how many KiB of the file the page cache holds (mincore over
// a mapping of it, which faults nothing in).
func cached(t *testing.T, file string) (have, size int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		have += int(v & 1)
	}
	return have * page >> 10, int(st.Size() >> 10)
}

// The release unmaps the binary's pages and drops them from the page
// cache (real memory, not only the process's share of it), and the
// restore reads them back.
func TestReleaseBinaryFreesItsPages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if inMemoryFS() {
		t.Skip("the test binary is in tmpfs, where the release frees nothing and does nothing")
	}
	// A test binary just linked is dirty in the page cache, and dirty
	// pages stay until written back; an installed binary is clean.
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pssBefore := pssFile(t)
	cacheBefore, size := cached(t, exe)
	releaseBinary()
	pssAfter := pssFile(t)
	cacheAfter, _ := cached(t, exe)
	t.Logf("binary %d KiB: PSS of file pages %d -> %d KiB, in the page cache %d -> %d KiB", size, pssBefore, pssAfter, cacheBefore, cacheAfter)
	if len(released) == 0 {
		t.Fatal("nothing released: the binary's read-only mappings were not found")
	}
	if pssBefore-pssAfter < pssBefore/3 {
		t.Errorf("PSS of file pages %d KiB after the release, %d before", pssAfter, pssBefore)
	}
	// What the code run meanwhile touched stays, in large folios of up
	// to 2 MiB each; the rest goes.
	if cacheAfter > cacheBefore-cacheBefore/3 {
		t.Errorf("the page cache holds %d KiB of the binary after the release, %d before", cacheAfter, cacheBefore)
	}
	rehearse()
	restoreBinary()
	if len(released) != 0 {
		t.Fatal("still released after the restore")
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		have, _ := cached(t, exe)
		if have >= size*9/10 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the restore read back %d KiB of the binary's %d in 10 s", have, size)
		}
	}
}
