package changeset

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
)

func sortStrings(s []string) { slices.Sort(s) }

// join joins a directory and a relative path; "" is the directory itself.
func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// writeFileSync writes a file atomically and durably: temp, fsync,
// rename, fsync of the directory.
func writeFileSync(path string, data []byte) error { return writeMeta(path, data, true) }

// writeFileAtomic writes a file atomically: temp, rename.
func writeFileAtomic(path string, data []byte) error { return writeMeta(path, data, false) }

func writeMeta(path string, data []byte, durable bool) error {
	tmp := fmt.Sprintf("%s.tmp-%x", path, rand.Uint64())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
