package container

import (
	"fmt"
	"github.com/pinfold/pinfold/internal/store"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestSwapMap(t *testing.T) {
	show := func(owner uint32) string {
		var b strings.Builder
		for _, m := range swapMap(owner) {
			b.WriteString(fmt.Sprint(m.ContainerID, " ", m.HostID, " ", m.Size) + ";")
		}
		return b.String()
	}
	for owner, want := range map[uint32]string{
		0:      "0 1879048192 65536;",
		1:      "0 1879048193 1;1 1879048192 1;2 1879048194 65534;",
		1000:   "0 1879049192 1;1 1879048193 999;1000 1879048192 1;1001 1879049193 64535;",
		65535:  "0 1879113727 1;1 1879048193 65534;65535 1879048192 1;",
		100000: "1 1879048193 65535;100000 1879048192 1;",
	} {
		if got := show(owner); got != want {
			t.Errorf("swapMap(%d) = %s, want %s", owner, got, want)
		}
	}
}

// TestIDMounts: the workspace's owner shows as the sandbox's root (host
// id store.RootIDBase) through the idmapped view, root's files as an id of
// the sandbox's range, and what the sandbox's root writes belongs to the
// owner on disk. Release and CleanMounts leave no mount behind.
func TestIDMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("idmapped mounts need root")
	}
	old := idMountsDir
	idMountsDir = t.TempDir()
	t.Cleanup(func() { idMountsDir = old })
	tempUserNSDir(t)
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	const owner = 4321
	os.Chown(ws, owner, owner)
	os.WriteFile(filepath.Join(ws, "mine"), nil, 0o644)
	os.Chown(filepath.Join(ws, "mine"), owner, owner)
	os.WriteFile(filepath.Join(ws, "roots"), nil, 0o600)

	m := newIDMounts(owner, owner)
	t.Cleanup(m.release) // before the temporary directories go
	view, err := m.bind(ws)
	if err != nil {
		t.Fatal(err)
	}
	// The engines bind the view as root; the probes below walk to it as
	// the sandbox's root.
	for d := m.dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	uid := func(p string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	if got := uid(filepath.Join(view, "mine")); got != store.RootIDBase {
		t.Errorf("the owner's file shows as %d, want the sandbox's root %d", got, store.RootIDBase)
	}
	if got := uid(filepath.Join(view, "roots")); got != store.RootIDBase+owner {
		t.Errorf("root's file shows as %d, want %d", got, store.RootIDBase+owner)
	}
	// The sandbox's root writes through the view.
	touch := exec.Command("touch", filepath.Join(view, "made"))
	touch.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: store.RootIDBase, Gid: store.RootIDBase}}
	if out, err := touch.CombinedOutput(); err != nil {
		t.Fatalf("writing as the sandbox's root: %v %s", err, out)
	}
	if got := uid(filepath.Join(ws, "made")); got != owner {
		t.Errorf("a file the sandbox's root made belongs to %d on disk, want the owner %d", got, owner)
	}
	// Read a root-only file as the sandbox's root: refused.
	cat := exec.Command("cat", filepath.Join(view, "roots"))
	cat.SysProcAttr = touch.SysProcAttr
	if err := cat.Run(); err == nil {
		t.Errorf("the sandbox's root read root's 0600 file through the view")
	}
	m.release()
	if len(mountPointsUnder(idMountsDir)) != 0 {
		t.Errorf("release left mounts: %v", mountPointsUnder(idMountsDir))
	}
	if ents, _ := os.ReadDir(idMountsDir); len(ents) != 0 {
		t.Errorf("release left %s", ents[0].Name())
	}

	// A killed run's mounts: CleanMounts detaches them, and only them.
	dead := filepath.Join(idMountsDir, "999999999-1-abc")
	os.Mkdir(dead, 0o700)
	m = &idMounts{uid: owner, gid: owner, dir: dead, ns: -1}
	t.Cleanup(m.release)
	if _, err := m.bind(ws); err != nil {
		t.Fatal(err)
	}
	syscall.Close(m.ns)
	m.ns = -1
	live := newIDMounts(owner, owner)
	t.Cleanup(live.release)
	if _, err := live.bind(ws); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanMounts()
	if err != nil || len(removed) != 1 || removed[0] != dead {
		t.Errorf("CleanMounts: %v %v, want %s", removed, err, dead)
	}
	if _, err := os.Stat(filepath.Join(ws, "mine")); err != nil {
		t.Errorf("CleanMounts removed the workspace's files: %v", err)
	}
	if got := mountPointsUnder(idMountsDir); len(got) != 1 || !strings.HasPrefix(got[0], live.dir+"/") {
		t.Errorf("after CleanMounts: %v, want the live run's mount only", got)
	}
}

// TestSharedNamespace: the user namespace of a map is made once and kept
// (the next run opens it rather than starting a process); a plain file
// where it would be kept (a pinfold between making the file and binding
// the namespace on it) is never taken for it.
func TestSharedNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("user namespaces bound to files need root")
	}
	tempUserNSDir(t)
	ino := func(fd int) uint64 {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	m := swapMap(4321)
	a, err := sharedNamespace(m, m)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(a)
	b, err := sharedNamespace(m, m)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(b)
	if ino(a) != ino(b) {
		t.Error("a second sandbox made a user namespace of its own")
	}
	if got := mountPointsUnder(userNSDir); len(got) != 1 {
		t.Errorf("kept: %v", got)
	}
	m2 := swapMap(1234)
	plain := filepath.Join(userNSDir, mapsName(m2, m2))
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := sharedNamespace(m2, m2)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(c)
	if _, err := openUserNS(plain); err == nil {
		t.Error("a plain file was taken for a user namespace")
	}
	if ino(c) == ino(a) {
		t.Error("another map got the same namespace")
	}
}

// tempUserNSDir keeps the test's user namespaces in a directory of its
// own, detached when it ends.
func tempUserNSDir(t *testing.T) {
	old := userNSDir
	userNSDir = t.TempDir()
	t.Cleanup(func() {
		for _, p := range mountPointsUnder(userNSDir) {
			syscall.Unmount(p, syscall.MNT_DETACH)
		}
		userNSDir = old
	})
}
