package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hostSystemDirs is what the host base shows: system directories only.
var hostSystemDirs = [...]string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt"}

// HostSystemDirs returns the top-level directories the host base shows
// (those that exist on this host are bound read-only).
func HostSystemDirs() []string { return append([]string(nil), hostSystemDirs[:]...) }

// under reports whether path p is dir or lies below it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Normalize fills the spec's defaults, makes its host paths canonical and
// checks what any runtime would refuse: unknown kinds and modes, a
// workspace that would hand the sandbox the host's system, mount targets
// the sandbox owns. Runtimes call it in New.
func (s *Spec) Normalize() error {
	if s.Base.Kind == "" {
		s.Base.Kind = BaseHost
	}
	if s.Hostname == "" {
		s.Hostname = DefaultHostname
	}
	if s.Network == "" {
		s.Network = NetworkNone
	}
	if s.Limits.TmpSize == 0 {
		s.Limits.TmpSize = DefaultTmpSize
	}
	if err := s.normalizeBase(); err != nil {
		return err
	}
	switch s.Network {
	case NetworkNone, NetworkHost, NetworkOutbound, NetworkAllow:
	default:
		return &SpecError{"network", fmt.Errorf("unknown network %q (want none, host, outbound or allow)", s.Network)}
	}
	if err := s.normalizeWorkspace(); err != nil {
		return err
	}
	if err := s.normalizeCaptures(); err != nil {
		return err
	}
	if s.Scratch != "" {
		d, err := canonicalDir(s.Scratch)
		if err != nil {
			return &SpecError{"scratch", err}
		}
		s.Scratch = d
	}
	if err := s.normalizeMounts(); err != nil {
		return err
	}
	if s.Limits.TmpSize < 1<<20 {
		return &SpecError{"limits", fmt.Errorf("tmp size %d is below 1MiB", s.Limits.TmpSize)}
	}
	return nil
}

func (s *Spec) normalizeBase() error {
	switch s.Base.Kind {
	case BaseHost, BaseDebian12:
	case BaseDir, BaseTar, BaseOCI:
		if s.Base.Path == "" && (s.Base.Kind != BaseOCI || s.Base.Ref == "") {
			return &SpecError{"base", fmt.Errorf("base %s needs a path", s.Base.Kind)}
		}
		if s.Base.Kind == BaseDir {
			d, err := canonicalDir(s.Base.Path)
			if err != nil {
				return &SpecError{"base", err}
			}
			s.Base.Path = d
		}
	default:
		return &SpecError{"base", fmt.Errorf("unknown base %q (want host, debian-12, dir, tar or oci)", s.Base.Kind)}
	}
	return nil
}

// normalizeWorkspace makes the workspace canonical, refuses one that
// would show the host's system, and checks the access to it.
func (s *Spec) normalizeWorkspace() error {
	if s.Workspace != "" {
		if s.Access == "" {
			s.Access = AccessReadWrite
		}
		ws, err := canonicalDir(s.Workspace)
		if err != nil {
			return &SpecError{"workspace", err}
		}
		// With access none nothing of it is shown (a run from / with
		// --access none, an app run anywhere).
		if s.Access != AccessNone {
			if err := checkWorkspace(ws); err != nil {
				return &SpecError{"workspace", err}
			}
		}
		s.Workspace = ws
	} else {
		s.Access = AccessNone
	}
	switch s.Access {
	case AccessReadWrite, AccessReadOnly, AccessNone:
	case AccessChangeset:
		if s.Changeset == nil || s.Changeset.Upper == "" || s.Changeset.Work == "" {
			return &SpecError{"workspace", errors.New("access changeset needs Spec.Changeset's upper and work directories")}
		}
	default:
		return &SpecError{"workspace", fmt.Errorf("unknown workspace access %q (want changeset, rw, ro or none)", s.Access)}
	}
	return nil
}

// normalizeCaptures checks the captured directories as workspaces.
func (s *Spec) normalizeCaptures() error {
	for i := range s.Captures {
		c := &s.Captures[i]
		p, err := canonicalDir(c.Path)
		if err != nil {
			return &SpecError{"capture", err}
		}
		if err := checkWorkspace(p); err != nil {
			return &SpecError{"capture", err}
		}
		if c.Upper == "" || c.Work == "" {
			return &SpecError{"capture", fmt.Errorf("capture %s needs upper and work directories", p)}
		}
		c.Path = p
	}
	return nil
}

// normalizeMounts resolves the mounts' sources and refuses targets that
// are not clean absolute paths or that the sandbox owns.
func (s *Spec) normalizeMounts() error {
	for i := range s.Mounts {
		m := &s.Mounts[i]
		src, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return &SpecError{"mount", err}
		}
		if src, err = filepath.Abs(src); err != nil {
			return &SpecError{"mount", err}
		}
		m.Source = src
		if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" {
			return &SpecError{"mount", fmt.Errorf("target %q must be a clean absolute path other than /", m.Target)}
		}
		for _, own := range [...]string{"/proc", "/dev"} {
			if under(m.Target, own) {
				return &SpecError{"mount", fmt.Errorf("target %s: %s belongs to the sandbox", m.Target, own)}
			}
		}
	}
	return nil
}

// canonicalDir resolves p to an absolute path without symlinks and checks
// it is a directory.
func canonicalDir(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", real)
	}
	return real, nil
}

// ErrWorkspace is wrapped by errors about a workspace pinfold refuses.
var ErrWorkspace = errors.New("refused workspace")

// checkWorkspace refuses directories whose exposure would undo the
// sandbox: the root, system directories, and places holding other users'
// files or host sockets.
func checkWorkspace(ws string) error {
	refused := ws == "/"
	for _, d := range hostSystemDirs {
		refused = refused || ws == "/"+d
	}
	for _, d := range [...]string{"/proc", "/dev", "/sys", "/tmp", "/run", "/var", "/var/run", "/var/tmp", "/home", "/root", "/boot"} {
		refused = refused || ws == d
	}
	if refused {
		return fmt.Errorf("%w %s: it is the root or a system directory", ErrWorkspace, ws)
	}
	return nil
}

// ErrLimits is wrapped by errors about limits this host cannot enforce.
var ErrLimits = errors.New("cannot enforce the limits")

// DefaultEnv is the environment of a command whose Cmd.Env is nil: a PATH
// of the standard system directories, HOME=/tmp (the only writable place
// besides the workspace), HOSTNAME, and TERM for terminals.
func DefaultEnv(spec *Spec, tty bool) []string {
	host := spec.Hostname
	if host == "" {
		host = DefaultHostname
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/tmp",
		"HOSTNAME=" + host,
	}
	if tty {
		term := os.Getenv("TERM")
		if term == "" {
			term = "xterm"
		}
		env = append(env, "TERM="+term)
	}
	return env
}
