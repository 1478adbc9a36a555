package doctor

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/preflight"
	"golang.org/x/sys/unix"
)

// Apply applies c's fix when c is Fixable and says what it did. The fix is
// worked out again from the host's current state, not from c.Fix, so an
// already fixed host is left alone:
//
//   - "userns", "userns.unprivileged": writes the sysctls that forbid user
//     namespaces under /proc/sys (root only). The change lasts until the
//     next boot; the message says how to keep it.
//   - "store.writable": creates the store directory with mode 0700, or
//     removes the group and others write bits from it.
//
// Apply never writes to /etc.
func Apply(ctx context.Context, c Check) (string, error) {
	if !c.Fixable {
		return "", errors.New(c.ID + ": no fix pinfold can apply")
	}
	h := c.host
	if h == nil {
		h = newHost()
	}
	switch c.ID {
	case "userns", "userns.unprivileged":
		ordinary := c.ID == "userns.unprivileged" || h.EUID != 0
		return h.applySysctls(h.Blockers(ordinary, nil))
	case "store.writable":
		return applyStore(c.path)
	}
	return "", errors.New(c.ID + ": no fix pinfold can apply")
}

func (h *host) applySysctls(ch []preflight.SysctlChange) (string, error) {
	if len(ch) == 0 {
		return "nothing to change: no sysctl forbids user namespaces now", nil
	}
	if h.EUID != 0 {
		return "", errors.New("changing sysctls needs root: " + preflight.SysctlFix(ch))
	}
	var did []string
	for _, c := range ch {
		p := h.SysctlPath(c.Name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err == nil {
			_, err = f.WriteString(c.Value + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return strings.Join(did, "; "), errors.New("setting " + c.Name + ": " + err.Error())
		}
		did = append(did, "set "+c.Name+" = "+c.Value+" (wrote "+p+")")
	}
	msg := strings.Join(did, "; ") + "; this lasts until the next boot"
	var conf []string
	for _, c := range ch {
		conf = append(conf, c.Name+" = "+c.Value)
	}
	msg += "; to keep it: printf '" + strings.Join(conf, "\\n") + "\\n' > /etc/sysctl.d/60-pinfold.conf"
	return msg, nil
}

// applyStore makes the store directory dir ("": the default) usable:
// creates it (mode 0700, parents too), or takes away write access of
// others.
func applyStore(dir string) (string, error) {
	dir, err := storeDir(dir)
	if err != nil {
		return "", err
	}
	var st unix.Stat_t
	switch err := unix.Stat(dir, &st); {
	case err == unix.ENOENT:
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return "", err
		}
		return "created " + dir + " (mode 700)", nil
	case err != nil:
		return "", &os.PathError{Op: "stat", Path: dir, Err: err}
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o022 != 0 && int(st.Uid) == unix.Geteuid():
		mode := st.Mode & 0o7777 &^ 0o022
		if err := unix.Chmod(dir, mode); err != nil {
			return "", &os.PathError{Op: "chmod", Path: dir, Err: err}
		}
		return "removed write access of others from " + dir + " (mode " + strconv.FormatUint(uint64(mode), 8) + ")", nil
	}
	return "nothing to change: " + dir + " exists", nil
}
