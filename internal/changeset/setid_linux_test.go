package changeset

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestApplyNeverPlantsPrivileges applies modes and owners a sandboxed
// command may set: set-id bits never reach the workspace, the owner is the
// one apply is told (the workspace's), and device nodes are refused.
func TestApplyNeverPlantsPrivileges(t *testing.T) {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "was-setuid"), "x\n", 0o755)
	os.Chmod(filepath.Join(o.lower, "was-setuid"), 0o4755) // the original may have it: untouched unless changed
	o.inside(t, `
for m in 6755 4755 2755 4700 0777 0600 1755; do echo $m > f$m; chmod $m f$m; done
mkdir sgid-dir sticky-dir && chmod 2775 sgid-dir && chmod 1777 sticky-dir
echo owned > owned && chown 4321:4321 owned
echo changed > was-setuid
`)
	es := o.scan(t)
	res, err := Apply(context.Background(), filepath.Join(o.dir, "j"), o.roots(), es, ApplyOptions{Owner: &Owner{UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{
		"f6755": 0o755, "f4755": 0o755, "f2755": 0o755, "f4700": 0o700, "f0777": 0o777, "f0600": 0o600, "f1755": 0o1755,
		"sgid-dir": 0o775, "sticky-dir": 0o1777, "owned": 0o644, "was-setuid": 0o755,
	}
	for name, mode := range want {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(o.lower, name), &st); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := st.Mode & 0o7777; got != mode {
			t.Errorf("%s: mode %o, want %o", name, got, mode)
		}
		if st.Uid != 1000 || st.Gid != 1000 {
			if name != "was-setuid" && !strings.HasSuffix(name, "-dir") {
				t.Errorf("%s: owner %d:%d, want 1000:1000", name, st.Uid, st.Gid)
			}
		}
	}
	var stripped []string
	for _, p := range res.Stripped {
		stripped = append(stripped, p)
	}
	if got := strings.Join(stripped, " "); got != "f2755 f4700 f4755 f6755 sgid-dir" && got != "f2755 f4700 f4755 f6755 sgid-dir was-setuid" {
		t.Errorf("stripped %q", got)
	}
	// Applying again does nothing: the stripped modes count as applied.
	res, err = Apply(context.Background(), filepath.Join(o.dir, "j"), o.roots(), es, ApplyOptions{Owner: &Owner{UID: 1000, GID: 1000}})
	if err != nil || res.Applied != 0 {
		t.Errorf("second apply: %+v %v", res, err)
	}
}

func TestApplyRefusesDevices(t *testing.T) {
	o := newOverlay(t)
	// What a sandbox with CAP_MKNOD could leave in its upper directory.
	if err := unix.Mknod(filepath.Join(o.upper, "null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(o.upper, "disk"), syscall.S_IFBLK|0o660, int(unix.Mkdev(8, 0))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(o.upper, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(o.upper, "file"), "x\n", 0o644)
	es := o.scan(t)
	_, err := Apply(context.Background(), filepath.Join(o.dir, "j"), o.roots(), es, ApplyOptions{})
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "character device") || !strings.Contains(err.Error(), "block device") {
		t.Fatalf("got %v, want a refusal naming the devices", err)
	}
	if ents, _ := os.ReadDir(o.lower); len(ents) != 0 {
		t.Errorf("a refused apply wrote %d entries", len(ents))
	}
}

func TestDiffAndExportShowStrippedBits(t *testing.T) {
	o := newOverlay(t)
	o.inside(t, `echo x > tool && chmod 4755 tool`)
	es := o.scan(t)
	var patch bytes.Buffer
	if err := WriteDiff(&patch, o.roots(), es, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := patch.String(); !strings.Contains(p, "new file mode 100755\n") || !strings.Contains(p, "bits of 104755 are not applied") {
		t.Errorf("patch:\n%s", p)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, o.roots(), es, DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	if j := js.String(); !strings.Contains(j, `"new_mode":"100755"`) || !strings.Contains(j, `"setid_stripped":true`) {
		t.Errorf("json: %s", j)
	}
	var layer bytes.Buffer
	if err := Export(&layer, o.roots(), es); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadLayer(bytes.NewReader(layer.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Path == "tool" && e.Mode.Perm() != 0o755 || e.Mode&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("exported %s with mode %v", e.Path, e.Mode)
		}
	}
}

// TestPartialApplyOfSetIDLeavesNoChange: once a file that differs only by
// set-id bits is applied (without them), the scan no longer lists it.
func TestPartialApplyOfSetIDLeavesNoChange(t *testing.T) {
	o := newOverlay(t)
	writeFile(t, filepath.Join(o.lower, "ok.txt"), "ok\n", 0o644)
	o.inside(t, `chmod 4755 ok.txt; echo z > z.txt`)
	es := o.scan(t)
	if len(es) != 2 {
		t.Fatalf("scan: %+v", es)
	}
	if _, err := Apply(context.Background(), filepath.Join(o.dir, "j"), o.roots(), es, ApplyOptions{Paths: []string{"ok.txt"}}); err != nil {
		t.Fatal(err)
	}
	if es := o.scan(t); len(es) != 1 || es[0].Path != "z.txt" {
		t.Errorf("after applying ok.txt the scan lists %+v", es)
	}
}
