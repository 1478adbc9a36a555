package seccomp

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestDefaultIsValid(t *testing.T) {
	p := Default()
	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Syscalls {
		want := syscall.EPERM
		if strings.HasPrefix(s.Name, "io_uring_") {
			want = syscall.ENOSYS
		}
		if s.Errno != want {
			t.Errorf("%s fails with %d, want %d", s.Name, s.Errno, want)
		}
	}
	for _, name := range []string{"personality", "clone", "unshare", "ioctl", "clone3", "ptrace"} {
		if slices.ContainsFunc(p.Syscalls, func(s Syscall) bool { return s.Name == name }) {
			t.Errorf("Default denies %s outright", name)
		}
	}
}

func TestDenied(t *testing.T) {
	got := Default().Denied()
	for _, want := range []string{
		"keyctl", "bpf", "mount", "umount2", "setns", "open_by_handle_at", "io_uring_setup",
		"syslog", "clock_settime64", "ioctl(TIOCSTI)", "ioctl(TIOCLINUX)",
		"clone(CLONE_NEW*)", "unshare(CLONE_NEW*)", "clone3",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("Denied() lacks %q", want)
		}
	}
	if slices.Contains(got, "personality") {
		t.Error("Denied() lists personality, which is allowed")
	}
	if got := (Profile{}).Denied(); len(got) != 0 {
		t.Errorf("zero Profile denies %q", got)
	}
	if got := (Profile{Ioctls: []uint32{0x8912}}).Denied(); !slices.Equal(got, []string{"ioctl(0x8912)"}) {
		t.Errorf("Denied() = %q, want [ioctl(0x8912)]", got)
	}
}

func TestCheckRejects(t *testing.T) {
	tests := []struct {
		name string
		p    Profile
		want string
	}{
		{"unknown", Profile{Syscalls: []Syscall{{Name: "frobnicate"}}}, `unknown syscall "frobnicate"`},
		{"sys_prefix", Profile{Syscalls: []Syscall{{Name: "sys_keyctl"}}}, "unknown syscall"},
		{"twice", Profile{Syscalls: []Syscall{{Name: "bpf"}, {Name: "keyctl"}, {Name: "bpf", Errno: syscall.ENOSYS}}}, `"bpf" listed twice`},
		{"errno_range", Profile{Syscalls: []Syscall{{Name: "bpf", Errno: 4096}}}, "errno 4096 for bpf is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.check()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// TestNoStartupWork keeps the package free of anything that runs when a
// program starts: no package-level variables, no init functions. It also
// checks that seccomp.go, and only it, carries the package doc.
func TestNoStartupWork(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Skip("no source files in the working directory")
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if hasDoc := f.Doc != nil; hasDoc != (name == "seccomp.go") {
			t.Errorf("%s: package doc present = %v", name, hasDoc)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok == token.VAR {
					t.Errorf("%s: package-level var at %s", name, fset.Position(d.Pos()))
				}
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == "init" {
					t.Errorf("%s: init function at %s", name, fset.Position(d.Pos()))
				}
			}
		}
	}
}
