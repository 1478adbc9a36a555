package native

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fuseImage writes a squashfs holding d/hello behind 4 KiB of other bytes
// (as an app holds its root image inside its archive) and returns the
// file and the image's offset.
func fuseImage(t *testing.T) (string, int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range []string{"mksquashfs", "squashfuse_ll"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (scripts/test-setup.sh installs it)", tool)
			}
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tree", "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "tree", "d", "hello"), []byte("hello from the image\n"), 0o600)
	img := filepath.Join(dir, "img.sqfs")
	if b, err := exec.Command("mksquashfs", filepath.Join(dir, "tree"), img, "-quiet", "-noappend", "-no-progress").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v %s", err, b)
	}
	sq, _ := os.ReadFile(img)
	file := filepath.Join(dir, "app")
	const offset = 4096
	if err := os.WriteFile(file, append(make([]byte, offset), sq...), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, offset
}

func identity(t *testing.T, file string, offset int64) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	return FuseIdentity(st.Dev, st.Ino, st.Size, [2]int64{st.Mtim.Sec, st.Mtim.Nsec}, [2]int64{st.Ctim.Sec, st.Ctim.Nsec}, offset)
}

func fuseConfig(file, ident string) *Config {
	const rdonly, nosuid, nodev = 1, 2, 4
	daemon, _ := exec.LookPath("squashfuse_ll")
	ops := []Op{
		{Kind: OpMkdir, B: "/.app", Mode: 0o700},
		{Kind: OpFuse, A: file, B: "/.app", C: daemon, D: ident, What: "mounting the image"},
		{Kind: OpMkdir, B: "/d", Mode: 0o755},
		{Kind: OpBind, A: "/.app/d", B: "/d", MountFlags: syscall.MS_REC, Attr: rdonly | nosuid | nodev, What: "binding /d"},
		{Kind: OpUmount, B: "/.app"},
		{Kind: OpRmdir, B: "/.app"},
		{Kind: OpMkdir, B: "/usr", Mode: 0o755},
		{Kind: OpBind, Flags: OpHostSource, A: "/usr", B: "/usr", MountFlags: syscall.MS_REC, Attr: rdonly | nosuid | nodev},
		{Kind: OpSymlink, A: "usr/bin", B: "/bin"},
		{Kind: OpSymlink, A: "usr/lib", B: "/lib"},
		{Kind: OpSymlink, A: "usr/lib64", B: "/lib64"},
	}
	return &Config{
		SpawnConfig: SpawnConfig{
			Namespaces: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
			UIDMap:     "0 1879048192 65536\n", GIDMap: "0 1879048192 65536\n", InitID: &ID{0, 0},
		},
		User: &ID{0, 0},
		Ops:  ops, Scratch: "/tmp", RootReadOnly: true, CapLast: 40, NoNewPrivs: true,
	}
}

// TestFuseMount mounts a squashfs at its offset in a file through
// squashfuse inside the sandbox: uid 0 of the image is the sandbox's root
// (a 0600 file of root's reads), and the mount is the sandbox's alone.
func TestFuseMount(t *testing.T) {
	file, offset := fuseImage(t)
	in, err := Start(fuseConfig(file, identity(t, file, offset)))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := in.Ready(); err != nil {
		t.Fatal(err)
	}
	r, w, _ := os.Pipe()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, err := in.Exec(&Exec{Args: []string{"sh", "-c", "stat -c '%u %a' /d/hello; cat /d/hello"}, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: "/", Stdio: []int{int(null.Fd()), int(w.Fd()), int(w.Fd())}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out, _ := io.ReadAll(r)
	st, err := in.Wait()
	if err != nil || st.Wait.ExitStatus() != 0 || string(out) != "0 600\nhello from the image\n" {
		t.Errorf("%v %+v %q", err, st, out)
	}
	if b, _ := os.ReadFile("/proc/self/mounts"); strings.Contains(string(b), "fuse.squashfuse") {
		t.Error("a squashfuse mount shows on the host")
	}
}

// TestFuseRefusesAnotherFile: the init opens the file by its path and
// refuses it unless it is the file of the identity pinfold checked (here:
// the file was replaced after its identity was taken).
func TestFuseRefusesAnotherFile(t *testing.T) {
	file, offset := fuseImage(t)
	ident := identity(t, file, offset)
	b, _ := os.ReadFile(file)
	os.Remove(file)
	os.WriteFile(file, b, 0o644) // the same bytes, another file
	in, err := Start(fuseConfig(file, ident))
	if err == nil {
		defer in.Close()
		err = in.Ready()
	}
	var se *SetupError
	if !errors.As(err, &se) || se.Step != StepFuse || se.Errno != syscall.ESTALE {
		t.Fatalf("a replaced file: %v, want ESTALE at step %d", err, StepFuse)
	}
}
