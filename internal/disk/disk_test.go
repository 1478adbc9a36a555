package disk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("volumes need root")
	}
}

// loopsOf lists the loop devices backed by image.
func loopsOf(t *testing.T, image string) []string {
	t.Helper()
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), image) {
			out = append(out, f)
		}
	}
	return out
}

func TestVolumeCapsWrites(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	image, dir := filepath.Join(tmp, "disk.img"), filepath.Join(tmp, "disk")
	const size = 32 << 20
	v, err := Create(context.Background(), image, dir, size)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	free, _, err := v.Free()
	if err != nil {
		t.Fatal(err)
	}
	if free > size || free < size-size/100 {
		t.Fatalf("free space %d, want about %d", free, size)
	}
	if !Mounted(dir) {
		t.Fatal("not mounted")
	}
	// Fill it: the write that passes the cap fails with ENOSPC.
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{'x'}, 64<<10)
	var wrote int64
	for i := 0; i < 1024; i++ {
		n, err := f.Write(chunk)
		wrote += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write: %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	// ext4 keeps back a few blocks for the file's own metadata.
	if wrote > size || wrote < size-size/32 {
		t.Fatalf("wrote %d bytes before ENOSPC, want about %d", wrote, size)
	}
	if !v.IsFull() {
		t.Fatal("IsFull is false on a full volume")
	}

	// Detached, it is off the mount table but still readable through v.
	if err := v.Detach(); err != nil {
		t.Fatal(err)
	}
	if Mounted(dir) {
		t.Fatal("still mounted after Detach")
	}
	out := t.TempDir()
	if err := v.CopyOut(context.Background(), "", out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(out, "big")); err != nil || fi.Size() != wrote {
		t.Fatalf("copied file: %v %v, want %d bytes", fi, err, wrote)
	}
	if len(loopsOf(t, image)) != 1 {
		t.Fatalf("loop devices of the image: %v", loopsOf(t, image))
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left behind: %v", err)
	}
	if l := loopsOf(t, image); len(l) != 0 {
		t.Fatalf("loop devices left behind: %v", l)
	}
}

func TestVolumeRemountAndCopyIn(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	image, dir := filepath.Join(tmp, "disk.img"), filepath.Join(tmp, "disk")
	v, err := Create(context.Background(), image, dir, MinSize)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("one"), 0o640)
	os.Symlink("a", filepath.Join(src, "l"))
	if err := os.Mkdir(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := v.CopyIn(context.Background(), src, "in"); err != nil {
		t.Fatal(err)
	}
	// An image a killed supervisor left unmounted mounts again, once
	// a copy of its mount in another mount namespace (a sandbox being
	// built copies the host's mounts) is gone: mounting it a second time
	// through another loop device would read it without the writes the
	// first mount still holds.
	holder := exec.Command("unshare", "-m", "sleep", "0.3")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	if _, err := Mount(image, dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "in", "a"))
	if err != nil || string(b) != "one" {
		t.Fatalf("after remount: %q %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "in", "l")); err != nil || l != "a" {
		t.Fatalf("symlink after remount: %q %v", l, err)
	}
	// One it left mounted is taken over by Attached, and closed.
	if err := Attached(image, dir).Close(); err != nil {
		t.Fatal(err)
	}
	if Mounted(dir) || len(loopsOf(t, image)) != 0 {
		t.Fatal("left mounted")
	}
	if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left behind: %v", err)
	}
}

func TestCreateRefusesTinyAndMissingRoom(t *testing.T) {
	tmp := t.TempDir()
	if _, err := Create(context.Background(), filepath.Join(tmp, "i"), filepath.Join(tmp, "d"), 1<<20); err == nil {
		t.Fatal("1MiB volume accepted")
	}
	needRoot(t)
	// A tmpfs of 8MiB cannot hold a 32MiB image: a clear error, no file left.
	small := filepath.Join(tmp, "small")
	os.Mkdir(small, 0o700)
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=8m"); err != nil {
		t.Skip("cannot mount a tmpfs:", err)
	}
	defer syscall.Unmount(small, syscall.MNT_DETACH)
	_, err := Create(context.Background(), filepath.Join(small, "i"), filepath.Join(tmp, "d"), 32<<20)
	if err == nil || !strings.Contains(err.Error(), "free") {
		t.Fatalf("err = %v, want a not-enough-space error", err)
	}
	if ents, _ := os.ReadDir(small); len(ents) != 0 {
		t.Fatalf("left %v behind", ents)
	}
}

// TestLoopOfSymlinkedStore: with the store reached through a symlink
// (/home -> /var/home), the image's loop device is still found, so Mount
// still waits for an earlier one to go.
func TestLoopOfSymlinkedStore(t *testing.T) {
	needRoot(t)
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	image, dir := filepath.Join(link, "disk.img"), filepath.Join(link, "disk")
	v, err := Create(context.Background(), image, dir, MinSize)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if loopOf(image) == "" {
		t.Errorf("no loop device found for %s", image)
	}
}
