package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Curated bases are built by pinfold from a distribution's packages:
//
//	bases/<name>/<hex>/rootfs/         the tree; never changed once in place
//	bases/<name>/<hex>/manifest.json   {"id","name","suite","mirror","packages":[...],"created","format","uid_shift"}
//	index/curated/<name>               "sha256:<hex>\n" of the newest build
//
// <hex> is the TreeDigest of the normalized tree (see normalizeDebian), so
// two builds from the same package versions have the same id whatever the
// mirror, the machine or the day.

// Debian12 is the curated Debian 12 (bookworm) base.
const Debian12 = "debian-12"

// CuratedNames are the curated bases pinfold knows how to build.
var CuratedNames = [...]string{Debian12}

// ErrUnknownBase: no curated base of that name.
var ErrUnknownBase = errors.New("unknown base")

// ErrNotBuilt: the curated base has not been built in this store yet.
var ErrNotBuilt = errors.New("base not built yet")

// ErrBuild: building a curated base failed (the mirror, the disk, the tool).
var ErrBuild = errors.New("building the base failed")

// BuildOptions tune BuildCurated.
type BuildOptions struct {
	// Mirror is the Debian mirror; empty means the machine's apt sources.
	Mirror string
	// UIDShift is added to every owner when building as root, as for tar
	// bases (ImportOptions.UIDShift).
	UIDShift uint32
	// Progress receives each step the builder reports ("Retrieving libc6
	// 2.36-9", "Configuring base-files..."), from one goroutine.
	Progress func(step string)
	// Log receives debootstrap's whole output.
	Log io.Writer
}

type curatedManifest struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Suite    string   `json:"suite"`
	Mirror   string   `json:"mirror"`
	Packages []string `json:"packages"`
	Created  string   `json:"created"`
	Format   int      `json:"format"`
	UIDShift *uint32  `json:"uid_shift,omitempty"`
}

func checkCurated(name string) error {
	for _, n := range CuratedNames {
		if n == name {
			return nil
		}
	}
	return fmt.Errorf("%w %q: the curated bases are %s", ErrUnknownBase, name, strings.Join(CuratedNames[:], ", "))
}

// CuratedBase returns the newest build of a curated base.
func (s *Store) CuratedBase(name string) (Base, error) {
	if err := checkCurated(name); err != nil {
		return Base{}, err
	}
	var buf [128]byte
	n, err := readSmall(s.dir+"/index/curated/"+name, buf[:])
	digest := strings.TrimSpace(string(buf[:n]))
	hexSum, ok := strings.CutPrefix(digest, digestPrefix)
	if err != nil || !ok || !isHex(hexSum) {
		return Base{}, fmt.Errorf("%s: %w (pinfold base build %s)", name, ErrNotBuilt, name)
	}
	dir := s.dir + "/bases/" + name + "/" + hexSum
	if _, err := os.Stat(dir + "/manifest.json"); err != nil {
		return Base{}, fmt.Errorf("%s: %w (pinfold base build %s)", name, ErrNotBuilt, name)
	}
	return Base{Digest: digest, Root: dir + "/rootfs"}, nil
}

// BuildCurated builds a curated base from its distribution's mirror and
// puts it in the store; a build with the same content as one in place
// reuses that one. Building needs root (debootstrap makes device nodes and
// chroots).
func (s *Store) BuildCurated(ctx context.Context, name string, opt BuildOptions) (_ Base, err error) {
	if err := checkCurated(name); err != nil {
		return Base{}, err
	}
	const suite = "bookworm"
	if os.Geteuid() != 0 {
		return Base{}, fmt.Errorf("%w: building %s runs debootstrap, which needs root: run `sudo pinfold base build %s`, or use a tar: or oci: base", ErrBuild, name, name)
	}
	tool, err := exec.LookPath("debootstrap")
	if err != nil {
		return Base{}, fmt.Errorf("%w: building %s needs debootstrap (apt-get install debootstrap)", ErrBuild, name)
	}
	mirror := opt.Mirror
	if mirror == "" {
		if mirror, err = AptMirror("/", suite); err != nil {
			return Base{}, fmt.Errorf("%w: %w for %s; add one to /etc/apt/sources.list.d or pass --mirror URL", ErrBuild, err, suite)
		}
	}
	for _, d := range [...]string{"tmp", "bases/" + name, "index/curated"} {
		if err := os.MkdirAll(s.dir+"/"+d, 0o700); err != nil {
			return Base{}, fmt.Errorf("building %s: %w", name, err)
		}
	}
	// One build at a time per store; a build that waited uses the one
	// that finished meanwhile when it was asked for the first build.
	before, _ := s.CuratedBase(name)
	unlock, err := s.lock(ctx, "base-"+name)
	if err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	defer unlock()
	if b, err := s.CuratedBase(name); err == nil && b != before && before.Digest == "" {
		return b, nil
	}
	work, err := s.newWorkDir()
	if err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	keep := false
	defer func() {
		if !keep {
			removeTree(work)
		}
	}()
	root := work + "/rootfs"
	if err := debootstrap(ctx, tool, suite, root, mirror, &opt); err != nil {
		return Base{}, err
	}
	if opt.Progress != nil {
		opt.Progress("Normalizing and digesting the tree")
	}
	if err := normalizeDebian(root); err != nil {
		return Base{}, fmt.Errorf("%w: normalizing: %w", ErrBuild, err)
	}
	digest, err := TreeDigest(root, debianUnhashed)
	if err != nil {
		return Base{}, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	m := curatedManifest{ID: digest, Name: name, Suite: suite, Mirror: mirror, Packages: dpkgPackages(root),
		Created: time.Now().UTC().Format(time.RFC3339), Format: manifestFormat}
	if opt.UIDShift != 0 {
		if err := shiftOwners(root, opt.UIDShift); err != nil {
			return Base{}, fmt.Errorf("%w: %w", ErrBuild, err)
		}
		m.UIDShift = &opt.UIDShift
	}
	if err := writeJSON(work+"/manifest.json", &m, 0o644); err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	if err := syncDir(work); err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	hexSum := strings.TrimPrefix(digest, digestPrefix)
	final := s.dir + "/bases/" + name + "/" + hexSum
	won, err := commitDir(work, final)
	if err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	keep = won
	if err := s.writeAtomic(s.dir+"/index/curated/"+name, []byte(digest+"\n")); err != nil {
		return Base{}, fmt.Errorf("building %s: %w", name, err)
	}
	return Base{Digest: digest, Root: final + "/rootfs"}, nil
}

// debootstrap runs tool to install suite from mirror into root, passing
// its output to opt's Log and its steps to opt's Progress; its error
// ends with the output's last lines.
func debootstrap(ctx context.Context, tool, suite, root, mirror string, opt *BuildOptions) error {
	cmd := exec.CommandContext(ctx, tool, "--variant=minbase", "--components=main", suite, root, mirror)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%w: starting debootstrap: %w", ErrBuild, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: starting debootstrap: %w", ErrBuild, err)
	}
	var tail []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if opt.Log != nil {
			io.WriteString(opt.Log, line+"\n")
		}
		if step, ok := strings.CutPrefix(line, "I: "); ok && opt.Progress != nil {
			opt.Progress(step)
		}
		if tail = append(tail, line); len(tail) > 8 {
			tail = tail[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: debootstrap %s from %s: %w:\n%s\n(a full disk, an unreachable mirror or a mirror without %s: check `df`, the mirror, or pass --mirror)",
			ErrBuild, suite, mirror, err, strings.Join(tail, "\n"), suite)
	}
	return nil
}

// debianUnhashed are the paths whose content depends on the machine or the
// day rather than on the packages: the mirror in sources.list and the
// password-change dates in shadow. They stay in the tree.
func debianUnhashed(rel string) bool {
	switch rel {
	case "etc/apt/sources.list", "etc/shadow", "etc/shadow-":
		return true
	}
	return false
}

// normalizeDebian removes what a debootstrap leaves that depends on the
// build (logs, caches, the downloaded package lists) or on the host it ran
// on (hostname, hosts, resolv.conf, machine ids).
func normalizeDebian(root string) error {
	emptyDirs := []string{"var/lib/apt/lists", "var/cache/apt/archives", "var/log", "tmp", "var/tmp"}
	for _, d := range emptyDirs {
		if err := emptyDir(filepath.Join(root, d)); err != nil {
			return err
		}
	}
	globs := []string{"var/cache/apt/*.bin", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
		"var/cache/ldconfig/aux-cache", "etc/hostname", "etc/resolv.conf", "var/lib/dbus/machine-id"}
	for _, g := range globs {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range matches {
			if err := os.Remove(m); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	files := map[string]string{
		"etc/machine-id": "",
		"etc/hosts":      "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":   "sandbox\n",
		// A file for sandboxes with a network to show pinfold's resolver over.
		"etc/resolv.conf": "# pinfold shows its own resolver here in sandboxes with a network\n",
	}
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// emptyDir removes what dir holds, keeping dir and its subdirectories.
func emptyDir(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return os.Remove(p)
		}
		return nil
	})
	return err
}

// dpkgPackages lists "name version" of the installed packages.
func dpkgPackages(root string) []string {
	b, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		return nil
	}
	var out []string
	for _, stanza := range strings.Split(string(b), "\n\n") {
		var name, version string
		installed := false
		for _, line := range strings.Split(stanza, "\n") {
			switch {
			case strings.HasPrefix(line, "Package: "):
				name = line[len("Package: "):]
			case strings.HasPrefix(line, "Version: "):
				version = line[len("Version: "):]
			case strings.HasPrefix(line, "Status: "):
				installed = strings.HasSuffix(line, " installed")
			}
		}
		if name != "" && installed {
			out = append(out, name+" "+version)
		}
	}
	return out
}

// shiftOwners adds shift to the owner and group of everything under root.
func shiftOwners(root string, shift uint32) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		// chown clears setuid and setgid bits; the sandbox runs with
		// no_new_privs, where they would do nothing anyway.
		if err := unix.Lchown(p, int(st.Uid+shift), int(st.Gid+shift)); err != nil {
			return fmt.Errorf("chown %s: %w", p, err)
		}
		return nil
	})
}

func writeJSON(path string, v any, mode os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), mode)
}

// writeAtomic replaces path with data through a file in tmp/.
func (s *Store) writeAtomic(path string, data []byte) error {
	tmp, err := s.workName()
	if err != nil {
		return err
	}
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
