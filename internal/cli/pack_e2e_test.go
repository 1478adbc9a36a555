package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinfold/pinfold/internal/conformance"
)

var (
	packHelperOnce sync.Once
	packHelperErr  error
)

// needPackHelper builds pinfold-pack beside the pinfold under test, where
// pinfold looks for it.
func needPackHelper(t *testing.T) {
	t.Helper()
	packHelperOnce.Do(func() {
		build := exec.Command("go", "build", "-o", filepath.Join(filepath.Dir(pinfold), "pinfold-pack"), "github.com/pinfold/pinfold/cmd/pinfold-pack")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			packHelperErr = fmt.Errorf("building pinfold-pack: %v\n%s", err, b)
		}
	})
	if packHelperErr != nil {
		t.Fatal(packHelperErr)
	}
}

// needTool skips when a tool is missing, except on CI, where
// scripts/test-setup.sh installs it.
func needTool(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed (scripts/test-setup.sh installs it)", n)
			}
			t.Skipf("%s is not installed", n)
		}
	}
}

// packFixture is a busybox base as a tarball and a git workspace holding
// hello.txt and run.sh, both outside /tmp (a sandbox has its own /tmp,
// which would hide a workspace packed below it).
type packFixture struct {
	dir, base, ws, store string
}

func newPackFixture(t *testing.T) *packFixture {
	t.Helper()
	needPackHelper(t)
	needTool(t, "git", "busybox")
	dir, err := os.MkdirTemp("/var/tmp", "pinfold-pack-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &packFixture{dir: dir, base: filepath.Join(dir, "base.tar"), ws: filepath.Join(dir, "ws"), store: filepath.Join(dir, "store")}
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "etc", "home/app"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", bb, filepath.Join(root, "bin/busybox")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, b)
	}
	for _, c := range []string{"sh", "cat", "ls", "echo", "true", "id", "stat", "pwd"} {
		os.Symlink("busybox", filepath.Join(root, "bin", c))
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"), 0o644)
	os.Chown(filepath.Join(root, "home/app"), 1000, 1000)
	// The workspace is below /var/tmp, which the base has as 1777.
	os.MkdirAll(filepath.Join(root, "var/tmp"), 0o755)
	os.Chmod(filepath.Join(root, "var/tmp"), os.ModeSticky|0o777)
	mustRun(t, "", "tar", "-C", root, "--numeric-owner", "-cf", f.base, ".")
	os.MkdirAll(f.ws, 0o755)
	os.WriteFile(filepath.Join(f.ws, "hello.txt"), []byte("hello from the image\n"), 0o644)
	os.WriteFile(filepath.Join(f.ws, "run.sh"), []byte("#!/bin/sh\necho \"run.sh $*\"; cat hello.txt\n"), 0o755)
	os.WriteFile(filepath.Join(f.ws, ".gitignore"), []byte("build/\n"), 0o644)
	os.MkdirAll(filepath.Join(f.ws, "build"), 0o755)
	os.WriteFile(filepath.Join(f.ws, "build/out"), []byte("ignored\n"), 0o644)
	mustRun(t, f.ws, "git", "init", "-q")
	mustRun(t, f.ws, "git", "add", ".")
	// An old commit: the files' times (now) are later and get clamped.
	t.Setenv("GIT_COMMITTER_DATE", "2020-01-02T03:04:05Z")
	t.Setenv("GIT_AUTHOR_DATE", "2020-01-02T03:04:05Z")
	mustRun(t, f.ws, "git", "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "init")
	return f
}

// packableDir is a new directory a workspace to pack can be: under
// /var/tmp, not /tmp (pack refuses a workspace a sandbox's /tmp covers).
func packableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "pinfold-test-ws-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func mustRun(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// pack runs pinfold pack in the workspace with the fixture's store (or
// another) and returns stdout, stderr and the status.
func (f *packFixture) pack(t *testing.T, store string, args ...string) (string, string, int) {
	t.Helper()
	if store == "" {
		store = f.store
	}
	t.Setenv("PINFOLD_STORE", store)
	return pf(t, f.ws, append([]string{"pack"}, args...)...)
}

// image packs the workspace on the busybox base into out and returns the
// digest.
func (f *packFixture) image(t *testing.T, store, out string, more ...string) string {
	t.Helper()
	args := append([]string{"image", "--base", "tar:" + f.base, "--out", out}, more...)
	stdout, errs, code := f.pack(t, store, args...)
	if code != 0 {
		t.Fatalf("pack image: %d %s", code, errs)
	}
	d := strings.TrimSpace(stdout)
	if !strings.HasPrefix(d, "sha256:") || len(d) != 71 {
		t.Fatalf("pack image printed %q", stdout)
	}
	return d
}

func TestPackImageIsDeterministic(t *testing.T) {
	f := newPackFixture(t)
	a := filepath.Join(f.dir, "a.tar")
	b := filepath.Join(f.dir, "b.tar")
	d1 := f.image(t, filepath.Join(f.dir, "store1"), a, "--tag", "pf/app:1", "--", "./run.sh")
	// Another store extracts the base again; the workspace's files get
	// new times (later than its commit, so clamped to it).
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(f.ws, "hello.txt"), later, later)
	d2 := f.image(t, filepath.Join(f.dir, "store2"), b, "--tag", "pf/app:1", "--", "./run.sh")
	if d1 != d2 {
		t.Fatalf("two packs differ: %s and %s", d1, d2)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatalf("the two archives differ in bytes (%d and %d)", len(ab), len(bb))
	}
	// An OCI layout of the same image has the same digest.
	lay := filepath.Join(f.dir, "layout")
	if d3 := f.image(t, "", lay, "--tag", "pf/app:1", "--", "./run.sh"); d3 != d1 {
		t.Fatalf("the layout's digest %s differs from the archive's %s", d3, d1)
	}
	// Another epoch, or another command, is another image.
	t.Setenv("SOURCE_DATE_EPOCH", "1000000000")
	if d4 := f.image(t, "", filepath.Join(f.dir, "c.tar"), "--", "./run.sh"); d4 == d1 {
		t.Fatal("SOURCE_DATE_EPOCH did not change the digest")
	}
	os.Unsetenv("SOURCE_DATE_EPOCH")
	// The config says what the sandbox is: its sandbox id is the one
	// pinfold explain shows, and the same id packs to the same digest.
	out, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--out", filepath.Join(f.dir, "d.tar"), "--json", "--tag", "pf/app:1", "--", "./run.sh")
	var r struct {
		Digest    string `json:"digest"`
		SandboxID string `json:"sandbox_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Digest != d1 {
		t.Fatalf("pack --json: %d %q %s", code, out, errs)
	}
	explain, _, _ := pf(t, f.ws, "explain", "--base", "tar:"+f.base)
	if r.SandboxID == "" || !strings.Contains(explain, r.SandboxID) {
		t.Errorf("sandbox id %q is not in pinfold explain's output:\n%s", r.SandboxID, explain)
	}
	inspect := mustRun(t, "", "skopeo", "inspect", "--config", "oci-archive:"+a)
	if !strings.Contains(inspect, r.SandboxID) {
		t.Errorf("the image's config lacks the sandbox id: %s", inspect)
	}
	// Nothing is left beside the output.
	ents, _ := os.ReadDir(f.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pinfold-pack-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestPackRefusesWorkspaceUnderTmp: a sandbox's own /tmp would hide a
// workspace packed below /tmp, so pack says so rather than write an image
// whose files pinfold cannot reach.
func TestPackRefusesWorkspaceUnderTmp(t *testing.T) {
	f := newPackFixture(t)
	tmp, err := os.MkdirTemp("/tmp", "pinfold-pack-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	ws := filepath.Join(tmp, "proj")
	mustRun(t, "", "cp", "-a", f.ws, ws)
	t.Setenv("PINFOLD_STORE", f.store)
	out := filepath.Join(f.dir, "tmp-img.tar")
	_, errs, code := pf(t, ws, "pack", "image", "--base", "tar:"+f.base, "--out", out)
	if code != 125 || !strings.Contains(errs, "is under /tmp") {
		t.Fatalf("pack of a workspace under /tmp: %d %s", code, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused pack wrote its output")
	}
	// Output names that say something else than what pack writes.
	for _, args := range [][]string{{"image", "--out", filepath.Join(f.dir, "x.tar.gz")}, {"app", "--out", filepath.Join(f.dir, "noext")}} {
		if _, errs, code := f.pack(t, "", append(args, "--base", "tar:"+f.base)...); code != 125 || !strings.Contains(errs, "PF101") {
			t.Errorf("pack %v: %d %s", args, code, errs)
		}
	}
}

func TestPackRefusesDirtyWorkspace(t *testing.T) {
	f := newPackFixture(t)
	out := filepath.Join(f.dir, "img.tar")
	os.WriteFile(filepath.Join(f.ws, "hello.txt"), []byte("changed\n"), 0o644)
	_, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--out", out)
	if code != 125 || !strings.Contains(errs, "PF195") || !strings.Contains(errs, "hello.txt") {
		t.Fatalf("modified file: %d %s", code, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused pack wrote its output")
	}
	dirty := f.image(t, "", out, "--allow-dirty")
	mustRun(t, f.ws, "git", "checkout", "hello.txt")
	os.WriteFile(filepath.Join(f.ws, "new.txt"), []byte("untracked\n"), 0o644)
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--out", out); code != 125 || !strings.Contains(errs, "PF195") {
		t.Fatalf("untracked file: %d %s", code, errs)
	}
	os.Remove(filepath.Join(f.ws, "new.txt"))
	// Ignored files neither dirty the workspace nor go in.
	clean := f.image(t, "", out)
	if clean == dirty {
		t.Error("the dirty pack has the clean one's digest")
	}
	// An open changeset of the workspace is uncommitted work too.
	if _, errs, code := pf(t, f.ws, "run", "--base", "tar:"+f.base, "--", "sh", "-c", "echo x > written.txt"); code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--out", out); code != 125 || !strings.Contains(errs, "PF195") || !strings.Contains(errs, "changeset") {
		t.Fatalf("open changeset: %d %s", code, errs)
	}
	// The host base is this machine, not an image.
	if _, errs, code := f.pack(t, "", "image", "--allow-dirty", "--out", out); code != 125 || !strings.Contains(errs, "PF196") {
		t.Fatalf("host base: %d %s", code, errs)
	}
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base); code != 125 || !strings.Contains(errs, "PF101") {
		t.Fatalf("no --out: %d %s", code, errs)
	}
	// A directory that holds something is not overwritten, and a failed
	// pack leaves nothing behind.
	full := filepath.Join(f.dir, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "keep"), []byte("keep"), 0o644)
	if _, errs, code := f.pack(t, "", "image", "--allow-dirty", "--base", "tar:"+f.base, "--out", full); code != 125 || !strings.Contains(errs, "PF197") || !strings.Contains(errs, "not empty") {
		t.Errorf("non-empty --out: %d %s", code, errs)
	}
	if ents, _ := os.ReadDir(full); len(ents) != 1 {
		t.Errorf("the directory was changed: %v", ents)
	}
	if _, errs, code := f.pack(t, "", "image", "--allow-dirty", "--base", "tar:"+f.base, "--out", filepath.Join(f.dir, "no/such/dir/x.tar")); code != 125 || !strings.Contains(errs, "PF197") {
		t.Errorf("--out in a missing directory: %d %s", code, errs)
	}
	ents, _ := os.ReadDir(f.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pinfold-pack-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestPackImageTools checks the image with skopeo and umoci: the layout
// and the archive inspect as OCI images, and the unpacked root holds the
// base and the workspace with the sandbox's owners, not the host's.
func TestPackImageTools(t *testing.T) {
	needTool(t, "skopeo", "umoci")
	f := newPackFixture(t)
	lay := filepath.Join(f.dir, "layout")
	t.Setenv("PINFOLD_PACK_HOST_VALUE", "from-the-host")
	d := f.image(t, "", lay, "--tag", "app", "-e", "PACKED=yes", "-e", "PINFOLD_PACK_HOST_VALUE", "--", "./run.sh", "x")
	var info struct {
		Digest string
		Layers []string
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "skopeo", "inspect", "oci:"+lay+":app")), &info); err != nil || info.Digest != d || len(info.Layers) != 2 {
		t.Fatalf("skopeo inspect: %+v %v (want %s)", info, err, d)
	}
	bundle := filepath.Join(f.dir, "bundle")
	mustRun(t, "", "umoci", "unpack", "--image", lay+":app", bundle)
	rootfs := filepath.Join(bundle, "rootfs")
	if b, err := os.ReadFile(filepath.Join(rootfs, f.ws, "hello.txt")); err != nil || string(b) != "hello from the image\n" {
		t.Fatalf("workspace file: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, f.ws, "build")); err == nil {
		t.Error("the ignored build/ was packed")
	}
	if _, err := os.Stat(filepath.Join(rootfs, f.ws, ".git")); err == nil {
		t.Error(".git was packed")
	}
	// --access none: the base alone, whatever the workspace holds.
	os.WriteFile(filepath.Join(f.ws, "dirty.txt"), []byte("x"), 0o644)
	f.image(t, "", filepath.Join(f.dir, "base-only"), "--access", "none")
	if err := json.Unmarshal([]byte(mustRun(t, "", "skopeo", "inspect", "oci:"+f.dir+"/base-only")), &info); err != nil || len(info.Layers) != 1 {
		t.Errorf("--access none: %+v %v", info, err)
	}
	os.Remove(filepath.Join(f.ws, "dirty.txt"))
	st := mustRun(t, "", "stat", "-c", "%u:%g", filepath.Join(rootfs, "home/app"), filepath.Join(rootfs, "bin/busybox"), filepath.Join(rootfs, f.ws, "hello.txt"))
	if st != "1000:1000\n0:0\n0:0\n" {
		t.Errorf("owners in the image: %q, want the base's 1000:1000 and 0:0", st)
	}
	// The workspace's layer keeps the base's modes for the directories
	// above the workspace.
	blobs, _ := filepath.Glob(filepath.Join(lay, "blobs/sha256/*"))
	found := false
	for _, b := range blobs {
		list, err := exec.Command("tar", "tvzf", b).Output()
		if err != nil || !strings.Contains(string(list), strings.TrimPrefix(f.ws, "/")+"/hello.txt") {
			continue // not the workspace's layer
		}
		found = true
		for _, l := range strings.Split(string(list), "\n") {
			if strings.HasSuffix(l, " var/tmp/") && !strings.HasPrefix(l, "drwxrwxrwt") {
				t.Errorf("the workspace's layer has /var/tmp as %q, want the base's drwxrwxrwt", l)
			}
		}
	}
	if !found {
		t.Error("no layer holds the workspace")
	}
	cfg := mustRun(t, filepath.Dir(bundle), "cat", filepath.Join(bundle, "config.json"))
	if !strings.Contains(cfg, `"./run.sh"`) || !strings.Contains(cfg, `"cwd": "`+f.ws+`"`) {
		t.Errorf("the runtime config lacks the command or working directory: %s", cfg)
	}
	if !strings.Contains(cfg, `"PACKED=yes"`) || strings.Contains(cfg, "from-the-host") {
		t.Errorf("the image's environment: want PACKED=yes and no value of the host's: %s", cfg)
	}
	arch := filepath.Join(f.dir, "img.tar")
	f.image(t, "", arch, "--tag", "app", "-e", "PACKED=yes", "-e", "PINFOLD_PACK_HOST_VALUE", "--", "./run.sh", "x")
	if err := json.Unmarshal([]byte(mustRun(t, "", "skopeo", "inspect", "oci-archive:"+arch)), &info); err != nil || info.Digest != d {
		t.Fatalf("skopeo inspect of the archive: %+v %v", info, err)
	}
}

func TestPackImageRunsInPodman(t *testing.T) {
	needRoot(t)
	needTool(t, "podman")
	f := newPackFixture(t)
	arch := filepath.Join(f.dir, "img.tar")
	tag := fmt.Sprintf("localhost/pinfold-pack-test:%d", os.Getpid())
	f.image(t, "", arch, "--tag", tag, "--", "./run.sh", "from-cmd")
	mustRun(t, "", "podman", "load", "-i", arch)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", tag).Run() })
	out := mustRun(t, "", "podman", "run", "--rm", "--runtime", "runc", "--network", "none",
		"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=1000:1000", tag)
	if out != "run.sh from-cmd\nhello from the image\n" {
		t.Errorf("podman run: %q", out)
	}
}

func TestPackImageRunsInDocker(t *testing.T) {
	needRoot(t)
	needTool(t, "docker", "dockerd")
	f := newPackFixture(t)
	if exec.Command("docker", "version").Run() != nil {
		dd, err := os.MkdirTemp("", "pinfold-pack-dockerd-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dd)
		old, had := os.LookupEnv("DOCKER_HOST")
		stop, err := conformance.StartDockerd(dd)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			stop()
			if had {
				os.Setenv("DOCKER_HOST", old)
			} else {
				os.Unsetenv("DOCKER_HOST")
			}
		}()
	}
	arch := filepath.Join(f.dir, "img.tar")
	tag := fmt.Sprintf("pinfold-pack-test:%d", os.Getpid())
	f.image(t, "", arch, "--tag", tag, "--", "./run.sh", "in-docker")
	mustRun(t, "", "docker", "load", "-i", arch)
	defer exec.Command("docker", "rmi", "-f", tag).Run()
	out := mustRun(t, "", "docker", "run", "--rm", "--network", "none", tag)
	if out != "run.sh in-docker\nhello from the image\n" {
		t.Errorf("docker run: %q", out)
	}
	// An app through docker, when asked.
	app := filepath.Join(f.dir, "app.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--", "./run.sh", "app"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	got, errs, code := pf(t, f.dir, "run", "--backend", "docker", app)
	if code != 0 || got != "run.sh app\nhello from the image\n" {
		t.Errorf("run --backend docker APP: %d %q %s", code, got, errs)
	}
}

// startRegistry starts Debian's docker-registry on a free loopback port
// with its storage in a temporary directory, and returns HOST:PORT.
func startRegistry(t *testing.T) string {
	t.Helper()
	needTool(t, "docker-registry")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	os.WriteFile(cfg, []byte("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: "+dir+"/data\nhttp:\n  addr: "+addr+"\n"), 0o644)
	cmd := exec.Command("docker-registry", "serve", cfg)
	logf, _ := os.Create(filepath.Join(dir, "log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("docker-registry did not listen on %s: %s", addr, b)
		}
	}
}

func TestPackImagePush(t *testing.T) {
	needTool(t, "skopeo")
	f := newPackFixture(t)
	reg := startRegistry(t)
	ref := reg + "/team/app:1"
	out, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref, "--json", "--", "./run.sh")
	var r struct{ Digest, Pushed string }
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack --push: %d %q %s", code, out, errs)
	}
	if r.Pushed != reg+"/team/app@"+r.Digest {
		t.Errorf("pushed %q, want %s/team/app@%s", r.Pushed, reg, r.Digest)
	}
	var info struct{ Digest string }
	if err := json.Unmarshal([]byte(mustRun(t, "", "skopeo", "inspect", "--tls-verify=false", "docker://"+ref)), &info); err != nil || info.Digest != r.Digest {
		t.Fatalf("the registry has %q (%v), want %s", info.Digest, err, r.Digest)
	}
	// What was pushed runs as a base.
	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-pull"))
	got, errs, code := pf(t, f.ws, "run", "--access", "none", "--base", "oci:"+reg+"/team/app@"+r.Digest, "-w", f.ws, "--", "./run.sh", "pulled")
	if code != 0 || got != "run.sh pulled\nhello from the image\n" {
		t.Errorf("run on the pushed image: %d %q %s", code, got, errs)
	}
	// A registry that is not there fails with a code, not a hang.
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", "127.0.0.1:1/x/y:1"); code != 125 || !strings.Contains(errs, "PF197") {
		t.Errorf("push to nowhere: %d %s", code, errs)
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (container engines, loop of the store's owners)")
	}
}

// newSigningKey writes an ECDSA P-256 key pair (PEM) into dir.
func newSigningKey(t *testing.T, dir, name string) (priv, pub string) {
	t.Helper()
	needTool(t, "openssl")
	priv, pub = filepath.Join(dir, name+".key"), filepath.Join(dir, name+".pub")
	mustRun(t, "", "openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", priv)
	mustRun(t, "", "openssl", "pkey", "-in", priv, "-pubout", "-out", pub)
	return priv, pub
}

func TestPackAppRunsWithoutTheProject(t *testing.T) {
	needRoot(t)
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "good")
	app := filepath.Join(f.dir, "hello.pinfold")
	digest := f.image(t, "", filepath.Join(f.dir, "img.tar"), "--", "./run.sh", "packed")
	out, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--sign-key", key, "--tag", "hello:1", "--json", "--", "./run.sh", "packed")
	var r struct {
		Digest    string
		SandboxID string `json:"sandbox_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack app: %d %q %s", code, out, errs)
	}
	if r.Digest != digest {
		t.Errorf("the app's image %s is not pack image's %s", r.Digest, digest)
	}
	// Elsewhere, with another store and no checkout: the app is all there is.
	elsewhere := filepath.Join(f.dir, "elsewhere")
	os.Mkdir(elsewhere, 0o755)
	os.Rename(f.ws, f.ws+".gone")
	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-run"))
	for _, c := range []struct {
		dir  string
		args []string
		want string
	}{
		{elsewhere, []string{"run", app}, "run.sh packed\nhello from the image\n"},
		{"/", []string{"run", app, "--", "./run.sh", "given"}, "run.sh given\nhello from the image\n"},
		{elsewhere, []string{"run", app, "cat", "hello.txt"}, "hello from the image\n"},
		{elsewhere, []string{"run", "--verify-key", pub, app}, "run.sh packed\nhello from the image\n"},
	} {
		got, errs, code := pf(t, c.dir, c.args...)
		if code != 0 || got != c.want {
			t.Errorf("%v in %s: %d %q %s", c.args, c.dir, code, got, errs)
		}
	}
	// The explain of an app names the sandbox it was packed from.
	explain, errs, _ := pf(t, elsewhere, "explain", app)
	if !strings.Contains(explain, "packed from:   sandbox id "+r.SandboxID) || r.SandboxID == "" {
		t.Errorf("explain: %q %s", explain, errs)
	}
	var info struct {
		Digest     string
		VerifiedBy string `json:"verified_by"`
		Signed     bool
		Cmd        []string
	}
	out, errs, code = pf(t, elsewhere, "app", "inspect", app, "--verify-key", pub, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Digest != digest || !info.Signed || info.VerifiedBy != pub ||
		strings.Join(info.Cmd, " ") != "./run.sh packed" {
		t.Errorf("app inspect: %d %q %s", code, out, errs)
	}
	// Another key's signature, or none, is refused when keys are required.
	_, other := newSigningKey(t, f.dir, "other")
	if _, errs, code := pf(t, elsewhere, "run", "--verify-key", other, app); code != 125 || !strings.Contains(errs, "PF177") {
		t.Errorf("signed by another key: %d %s", code, errs)
	}
	if out, errs, code := pf(t, elsewhere, "app", "inspect", app, "--verify-key", other); code != 125 || !strings.Contains(out, "signature:  NOT verified") {
		t.Errorf("inspect with another key: %d %q %s", code, out, errs)
	}
	// The same app through podman, when asked.
	if _, err := exec.LookPath("podman"); err == nil {
		got, errs, code := pf(t, elsewhere, "run", "--backend", "podman", app)
		if code != 0 || got != "run.sh packed\nhello from the image\n" {
			t.Errorf("run --backend podman APP: %d %q %s", code, got, errs)
		}
	}
	os.Rename(f.ws+".gone", f.ws)
	t.Setenv("PINFOLD_STORE", f.store)
	unsigned := filepath.Join(f.dir, "unsigned.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", unsigned, "--", "./run.sh"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	if _, errs, code := pf(t, elsewhere, "run", "--verify-key", pub, unsigned); code != 125 || !strings.Contains(errs, "PF177") || !strings.Contains(errs, "not signed") {
		t.Errorf("unsigned app with a key required: %d %s", code, errs)
	}
	// A file that is no app is refused with a code.
	bogus := filepath.Join(f.dir, "bogus.pinfold")
	os.WriteFile(bogus, []byte("not a tar"), 0o644)
	if _, errs, code := pf(t, elsewhere, "run", bogus); code != 125 || !strings.Contains(errs, "PF198") {
		t.Errorf("bogus app: %d %s", code, errs)
	}
	if _, errs, code := pf(t, elsewhere, "run", filepath.Join(f.dir, "img.tar")+"x"); code == 0 {
		t.Errorf("a missing file ran: %s", errs)
	}
}

// tamper rewrites the archive with the content of its entry named name
// replaced by data.
func tamper(t *testing.T, file, name string, data []byte) {
	t.Helper()
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var buf bytes.Buffer
	tr := tar.NewReader(in)
	tw := tar.NewWriter(&buf)
	found := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if hdr.Name == name {
			b, hdr.Size, found = data, int64(len(data)), true
		}
		tw.WriteHeader(hdr)
		tw.Write(b)
	}
	tw.Close()
	if !found {
		t.Fatalf("%s has no %s", file, name)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPackAppRefusesTampering(t *testing.T) {
	needRoot(t)
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "good")
	app := filepath.Join(f.dir, "app.pinfold")
	out, errs, code := f.pack(t, "", "app", "--base", "tar:"+f.base, "--out", app, "--sign-key", key, "--json", "--", "cat", "hello.txt")
	var r struct{ Layers []string }
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.Layers) != 2 {
		t.Fatalf("pack app: %d %q %s", code, out, errs)
	}
	orig, _ := os.ReadFile(app)
	// The workspace layer replaced by another (valid gzip tar) one.
	var evil bytes.Buffer
	zw := gzip.NewWriter(&evil)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(f.ws, "/") + "/hello.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("evil\n"))
	tw.Close()
	zw.Close()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"layer, no keys", []string{"run", app}},
		{"layer, keys", []string{"run", "--verify-key", pub, app}},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.WriteFile(app, orig, 0o644)
			tamper(t, app, "blobs/sha256/"+strings.TrimPrefix(r.Layers[1], "sha256:"), evil.Bytes())
			t.Setenv("PINFOLD_STORE", filepath.Join(t.TempDir(), "store"))
			got, errs, code := pf(t, f.dir, c.args...)
			if code == 0 || strings.Contains(got, "evil") {
				t.Errorf("a tampered layer ran: %d %q %s", code, got, errs)
			}
		})
	}
	// A signature over another manifest.
	os.WriteFile(app, orig, 0o644)
	other := filepath.Join(f.dir, "other.pinfold")
	os.WriteFile(filepath.Join(f.ws, "hello.txt"), []byte("other\n"), 0o644)
	if _, errs, code := f.pack(t, "", "app", "--allow-dirty", "--base", "tar:"+f.base, "--out", other, "--sign-key", key, "--", "cat", "hello.txt"); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	sig := mustRun(t, "", "tar", "xOf", other, "pinfold-signature.json")
	tamper(t, app, "pinfold-signature.json", []byte(sig))
	if _, errs, code := pf(t, f.dir, "run", "--verify-key", pub, app); code != 125 || !strings.Contains(errs, "PF177") || !strings.Contains(errs, "another manifest") {
		t.Errorf("a signature of another manifest: %d %s", code, errs)
	}
}

func TestPackImageSignedPushVerifies(t *testing.T) {
	needRoot(t)
	needTool(t, "skopeo")
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "good")
	_, other := newSigningKey(t, f.dir, "other")
	reg := startRegistry(t)
	ref := reg + "/team/signed:1"
	out, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--push", ref, "--sign-key", key, "--json", "--", "./run.sh")
	var r struct{ Digest, Signature string }
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("pack --push --sign-key: %d %q %s", code, out, errs)
	}
	if want := reg + "/team/signed:" + strings.Replace(r.Digest, ":", "-", 1) + ".sig"; r.Signature != want {
		t.Errorf("signature at %q, want %q", r.Signature, want)
	}
	// pinfold's own verifier (the cosign format, through skopeo) accepts it.
	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-pull"))
	got, errs, code := pf(t, f.ws, "run", "--access", "none", "-w", f.ws, "--base", "oci:"+ref, "--verify-key", pub, "--", "./run.sh", "verified")
	if code != 0 || got != "run.sh verified\nhello from the image\n" {
		t.Errorf("run with the signing key trusted: %d %q %s", code, got, errs)
	}
	if _, errs, code := pf(t, f.ws, "run", "--access", "none", "--base", "oci:"+ref, "--verify-key", other, "--", "true"); code != 125 || !strings.Contains(errs, "PF177") {
		t.Errorf("run with another key trusted: %d %s", code, errs)
	}
}

// TestPackImageSignedArchiveVerifies: an image archive (the form docker
// loads too) signed by pack verifies as an oci: base with the key, and
// not with another.
func TestPackImageSignedArchiveVerifies(t *testing.T) {
	needRoot(t)
	f := newPackFixture(t)
	key, pub := newSigningKey(t, f.dir, "good")
	_, other := newSigningKey(t, f.dir, "other")
	arch := filepath.Join(f.dir, "signed.tar")
	f.image(t, "", arch, "--sign-key", key, "--tag", "signed:1", "--", "./run.sh")
	t.Setenv("PINFOLD_STORE", filepath.Join(f.dir, "store-run"))
	got, errs, code := pf(t, f.dir, "run", "--access", "none", "-w", f.ws, "--verify-key", pub, "--base", "oci:"+arch, "--", "./run.sh", "signed")
	if code != 0 || got != "run.sh signed\nhello from the image\n" || !strings.Contains(errs, "verified the signature") {
		t.Errorf("run with the key: %d %q %s", code, got, errs)
	}
	if _, errs, code := pf(t, f.dir, "run", "--access", "none", "--verify-key", other, "--base", "oci:"+arch, "--", "true"); code != 125 || !strings.Contains(errs, "PF177") {
		t.Errorf("run with another key: %d %s", code, errs)
	}
	// A layout directory cannot carry a signature.
	if _, errs, code := f.pack(t, "", "image", "--base", "tar:"+f.base, "--out", filepath.Join(f.dir, "layout"), "--sign-key", key); code != 125 || !strings.Contains(errs, "PF197") {
		t.Errorf("signed layout: %d %s", code, errs)
	}
}

// TestPackConfigSection: pinfold.yaml's pack: section gives the command
// and tag where the command line gives none.
func TestPackConfigSection(t *testing.T) {
	needRoot(t)
	f := newPackFixture(t)
	os.WriteFile(filepath.Join(f.ws, "pinfold.yaml"), []byte("version: 1\nbase: tar:"+f.base+"\npack:\n  entrypoint: [./run.sh]\n  cmd: [from-config]\n  tag: cfg:1\n"), 0o644)
	mustRun(t, f.ws, "git", "add", "pinfold.yaml")
	mustRun(t, f.ws, "git", "-c", "user.email=t@example.org", "-c", "user.name=t", "commit", "-qm", "config")
	app := filepath.Join(f.dir, "cfg.pinfold")
	if _, errs, code := f.pack(t, "", "app", "--out", app); code != 0 {
		t.Fatalf("pack app: %d %s", code, errs)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", app}, "run.sh from-config\nhello from the image\n"},
		{[]string{"run", app, "--", "other"}, "run.sh other\nhello from the image\n"},
	} {
		if got, errs, code := pf(t, f.dir, c.args...); code != 0 || got != c.want {
			t.Errorf("%v: %d %q %s", c.args, code, got, errs)
		}
	}
	out, errs, code := pf(t, f.dir, "app", "inspect", app, "--json")
	var info struct{ Tag string }
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Tag != "cfg:1" {
		t.Errorf("app inspect: %d %q %s", code, out, errs)
	}
}
