package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinfold/pinfold/internal/units"
)

// Volume is a mounted, size-capped filesystem.
type Volume struct {
	Image string // the ext4 image
	dir   string // where it is (or was) mounted on the host
	fd    *os.File
}

// Create makes an image of a filesystem with size bytes free, with its
// space allocated on the host, and mounts it at dir (created if missing).
func Create(ctx context.Context, image, dir string, size int64) (*Volume, error) {
	if size < MinSize {
		return nil, sizeError(size)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: pinfold runs as uid %d", ErrUnsupported, os.Geteuid())
	}
	// ext4 keeps 3-5% for inode tables and bitmaps: the image is larger
	// than the cap, and a reserve file takes what is left over.
	total := (size + size/16 + 8<<20 + 4095) &^ 4095
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating the disk image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, total)
	if errors.Is(err, unix.EOPNOTSUPP) {
		err = f.Truncate(total)
		if err == nil {
			err = checkFree(filepath.Dir(image), total)
		}
	}
	f.Close()
	if err != nil {
		os.Remove(image)
		if errors.Is(err, unix.ENOSPC) {
			err = fmt.Errorf("%w: the store's filesystem has not %s free", err, units.FormatSize(total))
		}
		return nil, fmt.Errorf("allocating a %s disk image: %w", units.FormatSize(total), err)
	}
	if err := mkfs(ctx, image); err != nil {
		os.Remove(image)
		return nil, err
	}
	v, err := Mount(image, dir)
	if err != nil {
		os.Remove(image)
		return nil, err
	}
	if err := v.reserve(size); err != nil {
		v.Close()
		return nil, err
	}
	return v, nil
}

// mkfs makes an ext4 filesystem without a journal (a crash loses the run
// anyway) whose inode tables are never zeroed (the allocated image reads
// as zeros), with an inode per 8KiB so that many small files fit.
func mkfs(ctx context.Context, image string) error {
	bin := "mkfs.ext4"
	for _, d := range [...]string{"/usr/sbin", "/sbin"} {
		if _, err := os.Stat(d + "/mkfs.ext4"); err == nil {
			bin = d + "/mkfs.ext4"
			break
		}
	}
	cmd := exec.CommandContext(ctx, bin, "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode",
		"-b", "4096", "-i", "8192", "-E", "lazy_itable_init=1,nodiscard", "-L", "pinfold", image)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%w: mkfs.ext4 is missing (apt install e2fsprogs)", ErrUnsupported)
		}
		return fmt.Errorf("making the disk's filesystem: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Mount mounts an existing image at dir through a loop device that goes
// away with the mount.
func Mount(image, dir string) (*Volume, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// A second ext4 over the same image corrupts it: wait for the loop
	// device of an earlier mount to go (a copy of that mount in another
	// mount namespace, or the kernel's deferred autoclear, keeps it a while).
	if err := waitUnbound(image, 5*time.Second); err != nil {
		return nil, err
	}
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	loop, err := attach(img)
	if err != nil {
		return nil, err
	}
	// The mount keeps the loop device open; closing ours leaves it the
	// only user, so that unmounting frees the device (autoclear).
	defer loop.Close()
	err = unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable")
	if err != nil {
		return nil, fmt.Errorf("mounting the disk image at %s: %w", dir, err)
	}
	return &Volume{Image: image, dir: dir}, nil
}

// waitUnbound waits until no loop device is backed by image.
func waitUnbound(image string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		dev := loopOf(image)
		if dev == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the disk image %s is still in use by /dev/%s (mounted in another mount namespace?)", image, dev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loopOf names a loop device whose backing file is image, or "".
func loopOf(image string) string {
	// The kernel shows the backing file's absolute, resolved path.
	image, _ = filepath.Abs(image)
	if real, err := filepath.EvalSymlinks(image); err == nil {
		image = real
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			return filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// attach binds a free loop device to img.
func attach(img *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w (modprobe loop)", ErrUnsupported, err)
	}
	defer ctl.Close()
	for tries := 0; ; tries++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("finding a free loop device: %w", err)
		}
		loop, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			return loop, nil
		}
		loop.Close()
		// Another process took the same free device first: ask again.
		if !errors.Is(err, unix.EBUSY) || tries == 16 {
			return nil, fmt.Errorf("setting up %s: %w", loop.Name(), err)
		}
	}
}

// reserve fills what the filesystem has beyond size with a file nothing
// inside can reach, so that size bytes are left.
func (v *Volume) reserve(size int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(v.dir, &st); err != nil {
		return err
	}
	extra := int64(st.Bavail)*st.Bsize - size
	if extra <= 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(v.dir, ".reserve"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, extra); err != nil {
		return fmt.Errorf("sizing the disk: %w", err)
	}
	return nil
}

// Dir is where the volume is mounted on the host, until Detach.
func (v *Volume) Dir() string { return v.dir }

// Detach takes the volume off the host's mount table. It stays usable
// through v (and through every mount a sandbox cloned from it) until Close.
func (v *Volume) Detach() error {
	if v.fd != nil {
		return nil
	}
	fd, err := unix.Open(v.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Unmount(v.dir, unix.MNT_DETACH); err != nil {
		unix.Close(fd)
		return fmt.Errorf("detaching the disk from %s: %w", v.dir, err)
	}
	v.fd = os.NewFile(uintptr(fd), v.dir)
	os.Remove(v.dir)
	return nil
}

// Free returns the bytes and inodes left.
func (v *Volume) Free() (bytes int64, inodes uint64, err error) {
	var st unix.Statfs_t
	if v.fd != nil {
		err = unix.Fstatfs(int(v.fd.Fd()), &st)
	} else {
		err = unix.Statfs(v.dir, &st)
	}
	return int64(st.Bavail) * st.Bsize, st.Ffree, err
}

// IsFull reports whether writes ran out of space or inodes.
func (v *Volume) IsFull() bool {
	b, n, err := v.Free()
	return err == nil && (b < Full || n == 0)
}

// CopyOut copies the contents of rel inside the volume into dst, an
// existing directory, preserving everything cp -a does (owners, modes,
// times, extended attributes, hard links, device nodes).
func (v *Volume) CopyOut(ctx context.Context, rel, dst string) error {
	return v.copy(ctx, v.path(rel)+"/.", dst)
}

// CopyIn copies the contents of src into rel inside the volume.
func (v *Volume) CopyIn(ctx context.Context, src, rel string) error {
	return v.copy(ctx, src+"/.", v.path(rel))
}

// path names rel inside the volume for a cp run by copy: after Detach,
// through the descriptor cp inherits as fd 3.
func (v *Volume) path(rel string) string {
	if v.fd != nil {
		return "/proc/self/fd/3/" + rel
	}
	return filepath.Join(v.dir, rel)
}

func (v *Volume) copy(ctx context.Context, src, dst string) error {
	cmd := exec.CommandContext(ctx, "cp", "-a", "--", src, dst)
	if v.fd != nil {
		cmd.ExtraFiles = []*os.File{v.fd}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("copying %s: %w: %s", strings.TrimPrefix(src, "/proc/self/fd/3/"), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Close unmounts the volume (if still mounted) and removes its image.
func (v *Volume) Close() error {
	var errs []error
	if v.fd != nil {
		v.fd.Close()
		v.fd = nil
	} else if v.dir != "" {
		if err := unix.Unmount(v.dir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			// Busy: take it off the mount table; it goes once unused.
			if err2 := unix.Unmount(v.dir, unix.MNT_DETACH); err2 != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", v.dir, err))
			}
		}
		os.Remove(v.dir)
	}
	if err := os.Remove(v.Image); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Mounted reports whether dir is a mount point (a volume a killed
// supervisor left mounted).
func Mounted(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// Attached returns a volume for an image already mounted at dir.
func Attached(image, dir string) *Volume { return &Volume{Image: image, dir: dir} }

func checkFree(dir string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if int64(st.Bavail)*st.Bsize < need {
		return unix.ENOSPC
	}
	return nil
}
