// Package appmount decides whether runs of apps (pinfold pack app) mount
// their root image through squashfuse or unpack their layers into the
// store, finds squashfuse, and unpacks an app into the store after its
// first mounted run (Unpacked, Unpack): see docs/pack.md, "How it starts".
// The mount itself is the native runtime's (sandbox/native, initc
// OP_FUSE).
package appmount

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Env set to 0 makes every app run unpack its layers into the store
// instead of mounting its root image; set to Always, runs keep mounting it
// and nothing unpacks the app in the background (for measuring mounted
// starts, and for tests of the mount itself). By default the first run
// mounts it and starts the unpacking for the runs after it.
const Env = "PINFOLD_APP_MOUNT"

// Always is the value of Env that keeps apps mounted.
const Always = "always"

// UnpackLater reports whether a mounted run should unpack its app in the
// background.
func UnpackLater() bool {
	v := os.Getenv(Env)
	return v != "0" && v != Always
}

// daemons are the squashfuse programs, preferred first: the low-level one
// answers lookups without the high-level library's path bookkeeping.
var daemons = [...]string{"squashfuse_ll", "squashfuse"}

// Daemon returns the absolute path of squashfuse when apps can be mounted
// here, and why not otherwise.
func Daemon() (string, error) {
	if os.Getenv(Env) == "0" {
		return "", errors.New(Env + "=0")
	}
	// As root a sandbox maps the ids 0-65535 of the image (the store
	// shifts unpacked roots into that range too), so the owners squashfuse
	// reports are the image's. As another user it maps that user alone:
	// the image's root would show as nobody, where an unpacked root
	// belongs to the user.
	if os.Geteuid() != 0 {
		return "", errors.New("pinfold is not running as root")
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/fuse", &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "", errors.New("/dev/fuse is missing")
	}
	// The sandbox's init opens it with this process's ids (joined to the
	// sandbox's user namespace).
	if err := unix.Access("/dev/fuse", unix.R_OK|unix.W_OK); err != nil {
		return "", errors.New("/dev/fuse cannot be opened by this user")
	}
	for _, d := range daemons {
		p, err := exec.LookPath(d)
		if err != nil {
			continue
		}
		// squashfuse runs with the host's system directories as its root
		// (see initc's daemon_root): it must be found there.
		if real, err := filepath.EvalSymlinks(p); err == nil && filepath.IsAbs(real) && systemPath(real) {
			return real, nil
		}
	}
	return "", errors.New("squashfuse is not installed in /usr")
}

// Mode reports whether runs of apps here mount their root image ("mount")
// or unpack the app into the store ("unpack"), and why.
func Mode() (mode, why string) {
	p, err := Daemon()
	if err != nil {
		return "unpack", err.Error()
	}
	return "mount", p + " and /dev/fuse are usable"
}

// systemPath reports whether p lies in the system directories the daemon
// sees.
func systemPath(p string) bool {
	for _, d := range [...]string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}
