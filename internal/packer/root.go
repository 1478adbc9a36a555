package packer

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pinfold/pinfold/internal/pack"
)

// An app carries its image's layers merged into one squashfs (pack.RootFile)
// that a run can mount instead of unpacking the layers. sqfstar (squashfs-
// tools) makes it from one tar of the merged tree, which writeRoot streams
// from the layers just written: whiteouts applied, each path's last version
// kept, in the order the layers list them. Without sqfstar the app has no
// root image and every run unpacks it.

// errNoRoot is returned when the layers cannot be merged into one tree
// this way (a hard link whose target a later layer replaced).
var errNoRoot = errors.New("the layers cannot be merged into one root image")

type rootRef struct {
	layer, index int
	hdr          *tar.Header
}

// mergeLayers reads the layers' tars once and returns, for each path that
// survives, the entry that gives it.
func mergeLayers(ctx context.Context, layers []*fileLayer) (map[string]*rootRef, error) {
	final := map[string]*rootRef{}
	drop := func(p string, below int, under bool) {
		for n, r := range final {
			if r.layer < below && (n == p && !under || strings.HasPrefix(n, p+"/")) {
				delete(final, n)
			}
		}
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		for j := 0; ; j++ {
			if err := ctx.Err(); err != nil {
				rc.Close()
				return nil, err
			}
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return nil, err
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			dir, base := path.Split(name)
			dir = strings.TrimSuffix(dir, "/")
			switch {
			case base == ".wh..wh..opq":
				drop(dir, i, true)
			case strings.HasPrefix(base, ".wh."):
				drop(path.Join(dir, base[4:]), i, false)
			default:
				if hdr.Typeflag != tar.TypeDir {
					drop(name, i, true) // a file replaces a directory and what it held
				}
				final[name] = &rootRef{i, j, hdr}
			}
		}
		rc.Close()
	}
	for n, r := range final {
		if r.hdr.Typeflag == tar.TypeLink {
			t, ok := final[strings.TrimSuffix(r.hdr.Linkname, "/")]
			if !ok || t.layer != r.layer {
				return nil, fmt.Errorf("%w: %s", errNoRoot, n)
			}
		}
	}
	return final, nil
}

// writeMerged writes the merged tree as one tar: each directory where it
// first appears (with its last metadata), every other entry where its
// last version is.
func writeMerged(ctx context.Context, layers []*fileLayer, final map[string]*rootRef, w io.Writer) error {
	tw := tar.NewWriter(w)
	done := map[string]bool{}
	buf := make([]byte, 1<<20)
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return err
		}
		tr := tar.NewReader(rc)
		for j := 0; ; j++ {
			if err := ctx.Err(); err != nil {
				rc.Close()
				return err
			}
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return err
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			r, ok := final[name]
			if !ok || done[name] {
				continue
			}
			if r.hdr.Typeflag == tar.TypeDir {
				if hdr.Typeflag != tar.TypeDir {
					continue // a directory later: written where it first is one
				}
				done[name] = true
				if err := tw.WriteHeader(r.hdr); err != nil {
					rc.Close()
					return err
				}
				continue
			}
			if r.layer != i || r.index != j {
				continue
			}
			done[name] = true
			if err := tw.WriteHeader(hdr); err != nil {
				rc.Close()
				return err
			}
			if _, err := io.CopyBuffer(tw, tr, buf); err != nil {
				rc.Close()
				return err
			}
		}
		rc.Close()
	}
	return tw.Close()
}

// topEntries lists the merged tree's top-level entries.
func topEntries(final map[string]*rootRef) []pack.RootEntry {
	var top []pack.RootEntry
	for n, r := range final {
		if n == "" || n == "." || strings.Contains(n, "/") {
			continue
		}
		e := pack.RootEntry{Name: n, Mode: uint32(r.hdr.Mode) & 0o7777}
		switch r.hdr.Typeflag {
		case tar.TypeDir:
			e.Type = "dir"
		case tar.TypeSymlink:
			e.Type, e.Link = "symlink", r.hdr.Linkname
		case tar.TypeReg, tar.TypeLink:
			e.Type = "file"
		default:
			continue
		}
		top = append(top, e)
	}
	slices.SortFunc(top, func(a, b pack.RootEntry) int { return strings.Compare(a.Name, b.Name) })
	return top
}

// sqfstarArgs fix everything in the image that is not the tree: times,
// compression, block size. lz4 is what squashfs-tools compresses with
// fastest (0.2 s for 53 MB of tar where gzip took 10 s) and squashfuse
// reads fastest; 32 KiB blocks, since squashfuse decompresses a whole block
// for each read the kernel makes of it (a warm run of a busybox app spent
// 3.8 ms in its command with 128 KiB blocks, 2.6 ms with 32 KiB, 2.2 ms
// uncompressed, for a root image of about the same size). No duplicate
// detection: sqfstar 4.5's depends on the order its threads finish (the
// same tree gave images of 31,756 to 36,895 bytes, even with
// -processors 1), so identical files are stored twice. Its output is then
// the same on any number of CPUs but for one
// field: sqfstar 4.5 gives the root directory the time it ran, whatever
// -root-time says. The inode table is left uncompressed so that
// fixRootTime can set it (it is a small part of an image).
func sqfstarArgs(epoch int64, out string) []string {
	e := strconv.FormatInt(epoch, 10)
	return []string{"-quiet", "-no-progress", "-exit-on-error", "-reproducible", "-no-xattrs",
		"-comp", "lz4", "-b", "32K", "-noI", "-no-duplicates", "-mkfs-time", e, "-root-time", e, "-root-mode", "755",
		"-root-uid", "0", "-root-gid", "0", "-force", out}
}

// fixRootTime sets the root directory's time in the squashfs file to
// epoch. Superblock: root inode reference at 32 (block offset from the
// inode table << 16 | offset in the block), inode table start at 64; the
// inode's time is at 8, in metadata blocks of 8 KiB each behind a 2-byte
// header (bit 15 set: stored uncompressed, as -noI stores them).
func fixRootTime(file string, epoch int64) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var sb [96]byte
	if _, err := f.ReadAt(sb[:], 0); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(sb[0:]) != 0x73717368 {
		return errors.New("sqfstar wrote no squashfs")
	}
	ref := binary.LittleEndian.Uint64(sb[32:])
	table := int64(binary.LittleEndian.Uint64(sb[64:]))
	block, at := table+int64(ref>>16), int64(ref&0xffff)+8
	var t [4]byte
	binary.LittleEndian.PutUint32(t[:], uint32(epoch))
	for i := range t {
		b, o := block, at+int64(i)
		for o >= 8192 { // the field runs into the next block
			var h [2]byte
			if _, err := f.ReadAt(h[:], b); err != nil {
				return err
			}
			hv := binary.LittleEndian.Uint16(h[:])
			if hv&0x8000 == 0 {
				return errors.New("the inode table is compressed")
			}
			b += 2 + int64(hv&0x7fff)
			o -= 8192
		}
		var h [2]byte
		if _, err := f.ReadAt(h[:], b); err != nil {
			return err
		}
		if binary.LittleEndian.Uint16(h[:])&0x8000 == 0 {
			return errors.New("the inode table is compressed")
		}
		if _, err := f.WriteAt(t[i:i+1], b+2+o); err != nil {
			return err
		}
	}
	return f.Close()
}

// writeRoot writes the app's root image at file and returns what
// pinfold.json says of it; nil when sqfstar is missing or the layers do not
// merge (the app then has none).
func writeRoot(ctx context.Context, layers []*fileLayer, epoch time.Time, file string) (*pack.RootImage, error) {
	tool, err := exec.LookPath("sqfstar")
	if err != nil {
		return nil, nil
	}
	final, err := mergeLayers(ctx, layers)
	if errors.Is(err, errNoRoot) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e := max(epoch.Unix(), 0)
	cmd := exec.CommandContext(ctx, tool, sqfstarArgs(e, file)...)
	// sqfstar refuses SOURCE_DATE_EPOCH beside the times it is given
	// (pack reads it into the job's epoch).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	werr := writeMerged(ctx, layers, final, in)
	in.Close()
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("sqfstar: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return nil, werr
	}
	if err := fixRootTime(file, e); err != nil {
		return nil, fmt.Errorf("the root image: %w", err)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, err
	}
	return &pack.RootImage{Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n, Top: topEntries(final)}, nil
}

// withRoot returns the app's metadata with its root image added.
func withRoot(meta json.RawMessage, root *pack.RootImage) (json.RawMessage, error) {
	var m pack.AppMeta
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, err
	}
	m.Root = root
	return json.Marshal(m)
}
