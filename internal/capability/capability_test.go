package capability

import (
	"errors"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCatalog checks the invariants the lookups rely on.
func TestCatalog(t *testing.T) {
	debName := regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	names := Names()
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Fatalf("names not sorted and unique: %v", names)
	}
	owner := map[string]string{} // soname or alias -> capability
	for _, c := range catalog {
		if c.Description == "" || len(c.Sonames) == 0 {
			t.Errorf("%s: missing description or sonames", c.Name)
		}
		var deb *Install
		for i := range c.Installs {
			if c.Installs[i].Base == Debian12 {
				deb = &c.Installs[i]
			}
		}
		if deb == nil || len(deb.Runtime) == 0 {
			t.Errorf("%s: no runtime packages for %s", c.Name, Debian12)
			continue
		}
		for _, p := range slices.Concat(deb.Runtime, deb.Build) {
			if !debName.MatchString(p) {
				t.Errorf("%s: %q is not a Debian package name", c.Name, p)
			}
		}
		for _, so := range c.Sonames {
			if !strings.Contains(so, ".so") {
				t.Errorf("%s: %q is not a soname", c.Name, so)
			}
			if o, dup := owner["so:"+so]; dup {
				t.Errorf("soname %s in both %s and %s", so, o, c.Name)
			}
			owner["so:"+so] = c.Name
			if got, ok := BySoname(so); !ok || got != c.Name {
				t.Errorf("BySoname(%s) = %q, want %q", so, got, c.Name)
			}
		}
		for _, a := range c.Aliases {
			if _, ok := Lookup(a); ok {
				t.Errorf("%s: alias %q is a capability's name", c.Name, a)
			}
			if o, dup := owner["alias:"+a]; dup {
				t.Errorf("alias %s in both %s and %s", a, o, c.Name)
			}
			owner["alias:"+a] = c.Name
		}
	}
}

// TestTables checks that the inference tables are sorted for binary
// search and name only capabilities the catalog has.
func TestTables(t *testing.T) {
	tables := map[string][]pair{
		"pypi": pypiCaps[:], "npm": npmCaps[:], "crates": crateCaps[:],
		"headers": headerCaps[:], "pkg-config": pkgConfigCaps[:], "phrases": phrases[:],
	}
	for name, table := range tables {
		sorted := name != "phrases"
		for i, p := range table {
			if _, ok := Lookup(p.capability); !ok {
				t.Errorf("%s: %q maps to unknown capability %q", name, p.key, p.capability)
			}
			if sorted && i > 0 {
				prev := table[i-1]
				if prev.key > p.key || prev.key == p.key && prev.capability >= p.capability {
					t.Errorf("%s: %v not after %v", name, p, prev)
				}
			}
		}
	}
	for _, p := range pypiCaps {
		if normalizePyPI(p.key) != p.key {
			t.Errorf("pypi key %q is not normalised", p.key)
		}
	}
	for _, p := range crateCaps {
		if normalizeCrate(p.key) != p.key {
			t.Errorf("crate key %q is not normalised", p.key)
		}
	}
}

// TestCatalogPackagesExist asks apt whether every package is in Debian 12,
// on hosts whose apt lists are bookworm's.
func TestCatalogPackagesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("asks apt-cache")
	}
	if out, err := exec.Command("apt-cache", "policy").Output(); err != nil || !strings.Contains(string(out), "n=bookworm") {
		t.Skip("no apt-cache with bookworm lists")
	}
	var pkgs []string
	for _, c := range catalog {
		for _, in := range c.Installs {
			if in.Base == Debian12 {
				pkgs = append(pkgs, in.Runtime...)
				pkgs = append(pkgs, in.Build...)
			}
		}
	}
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	out, _ := exec.Command("apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...).Output()
	have := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if p, ok := strings.CutPrefix(line, "Package: "); ok {
			have[strings.TrimSpace(p)] = true
		}
	}
	for _, p := range pkgs {
		if !have[p] {
			t.Errorf("apt-cache does not know %s", p)
		}
	}
}

func TestPackages(t *testing.T) {
	tests := []struct {
		name    string
		cap     string
		base    Base
		build   bool
		want    []string
		wantErr error
		errText string
	}{
		{name: "runtime", cap: "postgres", base: Debian12, want: []string{"libpq5"}},
		{name: "build", cap: "postgres", base: Debian12, build: true, want: []string{"libpq5", "libpq-dev"}},
		{name: "xml build", cap: "xml", base: Debian12, build: true, want: []string{"libxml2", "libxslt1.1", "libxml2-dev", "libxslt1-dev"}},
		{name: "runtime only capability", cap: "browser", base: Debian12, build: true},
		{name: "alias", cap: "postgresql", base: Debian12, wantErr: ErrUnknown, errText: `unknown capability "postgresql" (did you mean "postgres"?)`},
		{name: "typo", cap: "imagecodec", base: Debian12, wantErr: ErrUnknown, errText: `unknown capability "imagecodec" (did you mean "imagecodecs"?)`},
		{name: "package name", cap: "libpq-dev", base: Debian12, wantErr: ErrUnknown, errText: `(did you mean "postgres"?)`},
		{name: "nothing close", cap: "quantum", base: Debian12, wantErr: ErrUnknown, errText: `unknown capability "quantum" (see pinfold capability list)`},
		{name: "other base", cap: "vips", base: "alpine-3.20", wantErr: ErrUnavailable, errText: `capability "vips" is not available on base "alpine-3.20"; it is packaged for debian-12`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Packages(tt.cap, tt.base, tt.build)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if len(got) == 0 {
				t.Error("no packages")
			}
		})
	}
}

func TestLookupCopies(t *testing.T) {
	c, ok := Lookup("postgres")
	if !ok || c.Sonames[0] != "libpq.so.5" {
		t.Fatalf("Lookup(postgres) = %+v, %v", c, ok)
	}
	c.Sonames[0] = "changed"
	c.Installs[0].Runtime[0] = "changed"
	if c2, _ := Lookup("postgres"); c2.Sonames[0] != "libpq.so.5" || c2.Installs[0].Runtime[0] != "libpq5" {
		t.Error("changing a Lookup result changed the catalog")
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup(nope) found something")
	}
}

func TestBySoname(t *testing.T) {
	tests := []struct {
		soname string
		want   string // "" for not found
	}{
		{"libpq.so.5", "postgres"},
		{"libpq.so.5.15", "postgres"},
		{"libpq.so", "postgres"},
		{"/usr/lib/x86_64-linux-gnu/libpq.so.5", "postgres"},
		{"libpq.so.4", ""},
		{"libjpeg.so.62.3.0", "imagecodecs"},
		{"libvips-cpp.so.42", "vips"},
		{"libGL.so.1", "opengl"},
		{"libgeos.so.3.11.1", "geos"},
		{"libgeos_c.so.1.17.1", "geos"},
		{"libbz2.so.1.0.4", "bz2"},
		{"libbz2.so.1", ""}, // Debian's soname is libbz2.so.1.0
		{"libssl3.so", "browser"},
		{"libssl.so.3", "ssl"},
		{"libfoo.so.1", ""},
		{"libc.so.6", ""},
		{"libpq", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, ok := BySoname(tt.soname)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("BySoname(%q) = %q, %v; want %q", tt.soname, got, ok, tt.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	tests := map[string]string{
		"postgres": "postgres", "Postgres": "postgres", "postgresql": "postgres", "openssl": "ssl",
		"libxml2": "xml", "krb5": "kerberos", "libpq5": "postgres", "libpq.so.5": "postgres",
		"zeromq": "zmq", "mysq": "mysql", "sqlit": "sqlite", "kerberso": "kerberos", "xyzzy": "", "": "",
	}
	for in, want := range tests {
		if got := Suggest(in); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
