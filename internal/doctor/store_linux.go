package doctor

// The store's checks: where it is, its filesystem and free space, and
// its bases.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/store"
	"golang.org/x/sys/unix"
)

// storeDir is the store directory to check.
func storeDir(dir string) (string, error) {
	if dir == "" {
		return store.DefaultDir()
	}
	return filepath.Abs(dir)
}

// storeChecks are "store.writable" and "store.space".
func (h *host) storeChecks(dir string) []Check {
	w := Check{ID: "store.writable", Title: "store directory"}
	sp := Check{ID: "store.space", Title: "store free space"}
	dir, err := storeDir(dir)
	if err != nil {
		w.Status, w.Detail = Fail, err.Error()
		w.Fix = "set PINFOLD_STORE to a directory of your own"
		sp.Status, sp.Detail = Warn, "not checked: no store directory"
		return []Check{w, sp}
	}
	w.Detail, w.path = dir, dir
	existing := dir // the directory whose file system holds the store
	var st unix.Stat_t
	err = unix.Stat(dir, &st)
	switch {
	case err == unix.ENOENT:
		existing = nearestDir(dir)
		if unix.Faccessat(unix.AT_FDCWD, existing, unix.W_OK|unix.X_OK, unix.AT_EACCESS) == nil {
			w.Status = Warn
			w.Detail = dir + " does not exist yet; pinfold creates it when it first needs it"
			w.Fix = "mkdir -m 700 -p " + dir
			w.Fixable = true
		} else {
			w.Status = Fail
			w.Detail = dir + " does not exist and " + existing + " is not writable by " + h.AsWho()
			w.Fix = "create it for this user (mkdir -p " + dir + " && chown " + strconv.Itoa(h.EUID) + " " + dir + "), or set PINFOLD_STORE to a directory of your own"
		}
	case err != nil:
		w.Status = Fail
		w.Detail = "cannot use " + dir + ": " + err.Error()
		w.Fix = "set PINFOLD_STORE to a directory of your own"
		existing = nearestDir(dir)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		w.Status = Fail
		w.Detail = dir + " is not a directory"
		w.Fix = "remove it, or set PINFOLD_STORE to a directory of your own"
		existing = filepath.Dir(dir)
	case int(st.Uid) != h.EUID:
		w.Status = Fail
		w.Detail = dir + " belongs to uid " + strconv.Itoa(int(st.Uid)) + ", not to " + h.AsWho()
		w.Fix = "chown " + strconv.Itoa(h.EUID) + " " + dir + ", or set PINFOLD_STORE to a directory of your own"
	case st.Mode&0o022 != 0:
		w.Status = Fail
		w.Detail = dir + " may be written by others (mode " + strconv.FormatUint(uint64(st.Mode&0o7777), 8) + ")"
		w.Fix = "chmod go-w " + dir
		w.Fixable = true
	default:
		f, err := os.CreateTemp(dir, ".doctor-*")
		if err != nil {
			w.Status = Fail
			w.Detail = "cannot write in " + dir + ": " + err.Error()
			w.Fix = "make it writable by this user, or set PINFOLD_STORE to a directory of your own"
			break
		}
		f.Close()
		os.Remove(f.Name())
		w.Status = Pass
		w.Detail = dir + " (writable, mode " + strconv.FormatUint(uint64(st.Mode&0o7777), 8) + ")"
	}

	var fs unix.Statfs_t
	if err := unix.Statfs(existing, &fs); err != nil {
		sp.Status, sp.Detail = Warn, "statfs "+existing+": "+err.Error()
		return []Check{w, sp}
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	sp.Detail = humanBytes(free) + " free on the file system of " + existing
	switch {
	case free < 100<<20:
		sp.Status = Fail
	case free < 1<<30:
		sp.Status = Warn
	default:
		sp.Status = Pass
	}
	if sp.Status != Pass {
		sp.Fix = "free space there, or set PINFOLD_STORE to a directory on a larger file system (tar bases need their unpacked size)"
	}
	return []Check{w, sp}
}

// nearestDir is the closest ancestor of dir that exists.
func nearestDir(dir string) string {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == "/" {
			return d
		}
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// basesCheck looks at the host base's directories and counts the tar
// bases in the store.
func (h *host) basesCheck(dir string) Check {
	c := Check{ID: "bases", Title: "bases"}
	var have, miss []string
	for _, d := range [...]string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			have = append(have, d)
		} else {
			miss = append(miss, d)
		}
	}
	if len(have) == 0 || have[0] != "/usr" {
		c.Status = Fail
		c.Detail = "/usr is missing: the host base has nothing to run"
		c.Fix = "use --base dir:PATH or --base tar:PATH with a root file system"
		return c
	}
	c.Status = Pass
	c.Detail = "host base: " + strings.Join(have, " ")
	if dir, err := storeDir(dir); err == nil {
		m, _ := filepath.Glob(filepath.Join(dir, "bases", "tar", "*", "manifest.json"))
		switch len(m) {
		case 0:
			c.Detail += "; no tar bases in the store"
		case 1:
			c.Detail += "; 1 tar base in the store"
		default:
			c.Detail += "; " + strconv.Itoa(len(m)) + " tar bases in the store"
		}
	}
	return c
}
