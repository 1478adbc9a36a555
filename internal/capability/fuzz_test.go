package capability

import (
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// The parsers read files and output the user's command produced: they
// must not panic or hang on anything.

func FuzzLockfileParsers(f *testing.F) {
	for _, s := range []string{requirementsTxt, poetryLock, uvLock, pipfileLock, packageLockV3, packageLockV1, cargoLock} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range []string{"requirements.txt", "poetry.lock", "Cargo.lock", "Pipfile.lock", "package-lock.json"} {
			for _, fd := range must(lockfileParser(name)(name, []byte(s))) {
				if fd.Capability == "" || fd.Source != Lockfile {
					t.Fatalf("%s: bad finding %+v", name, fd)
				}
			}
		}
	})
}

func must(fs []Finding, _ error) []Finding { return fs }

func FuzzFromOutput(f *testing.F) {
	f.Add("x: error while loading shared libraries: libpq.so.5: cannot open shared object file")
	f.Add("Error loading shared library libsqlite3.so.0: No such file")
	f.Add("fatal error: 'ffi.h' file not found\nPackage 'libpq', required by 'virtual:world', not found")
	f.Add("The system library `openssl` required by crate `openssl-sys` was not found.")
	f.Fuzz(func(t *testing.T, s string) {
		for _, fd := range FromOutput([]byte(s)) {
			if fd.Source != RunError || len(fd.Evidence) > maxEvidence+3 {
				t.Fatalf("bad finding %+v", fd)
			}
		}
	})
}

func FuzzELF(f *testing.F) {
	dir := f.TempDir()
	writeELF(f, filepath.Join(dir, "seed.so"), elf.Machine(hostMachine()), 0o644, "libseed.so.1", "libpq.so.5")
	seed, err := os.ReadFile(filepath.Join(dir, "seed.so"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, ".venv"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ".venv/x.so"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := scanELF(context.Background(), dir, nil, bounds{entries: 10, objects: 10, read: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	})
}
