package doctor

import (
	"context"
	"encoding/binary"
	"os"
	"strings"

	"github.com/pinfold/pinfold/sandbox/gvisor"
)

// gvisorCheck is "gvisor": where runsc is, the gVisor version it was
// built from and the platform pinfold runs it with. An optional backend:
// a missing runsc is a warning.
func gvisorCheck(ctx context.Context) Check {
	c := Check{ID: "gvisor", Title: "gVisor (backend gvisor)"}
	path, err := gvisor.FindRunsc()
	if err != nil {
		c.Status = Warn
		c.Detail = "runsc not found (optional: pinfold's own sandbox does not need it)"
		c.Fix = "to use backend: gvisor, build runsc (CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@VERSION) and set " + gvisor.RunscEnv + " to it or put it beside pinfold"
		return c
	}
	version := "an unknown version"
	if v := modVersion(path); v != "" {
		version = "gVisor " + v
	}
	platform := "platform " + gvisor.Platform + " (needs neither KVM nor ptrace)"
	c.Status = Pass
	c.Detail = path + ", " + version + ", " + platform
	if os.Geteuid() != 0 {
		c.Status = Warn
		c.Detail += "; the gvisor backend runs as root only"
		c.Fix = "run pinfold as root to use backend: gvisor"
	}
	return c
}

// modVersion returns the version of the main module a Go executable was
// built from, as the toolchain records it in the ELF section
// .go.buildinfo, or "" for anything else. runsc built with go install
// says VERSION_MISSING to --version; this is where its version is.
// debug/buildinfo reads it too, but would link debug/elf, dwarf, macho
// and pe into pinfold, whose inits every start pays.
func modVersion(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	at := func(off uint64, n int) []byte {
		b := make([]byte, n)
		if _, err := f.ReadAt(b, int64(off)); err != nil {
			return nil
		}
		return b
	}
	le := binary.LittleEndian
	// An ELF64 little-endian header: where the section headers are, their
	// size and number, and which one holds their names.
	h := at(0, 64)
	if h == nil || string(h[:4]) != "\x7fELF" || h[4] != 2 || h[5] != 1 {
		return ""
	}
	shoff, shsize, shnum, names := le.Uint64(h[0x28:]), int(le.Uint16(h[0x3a:])), int(le.Uint16(h[0x3c:])), int(le.Uint16(h[0x3e:]))
	if shsize < 0x28 || shnum > 1<<12 || names >= shnum {
		return ""
	}
	sh := at(shoff, shsize*shnum)
	if sh == nil {
		return ""
	}
	section := func(i int) (name uint32, off, size uint64) {
		s := sh[i*shsize:]
		return le.Uint32(s), le.Uint64(s[0x18:]), le.Uint64(s[0x20:])
	}
	_, stroff, strsize := section(names)
	strtab := at(stroff, int(min(strsize, 1<<16)))
	for i := range shnum {
		name, off, size := section(i)
		if int(name) >= len(strtab) || !strings.HasPrefix(string(strtab[name:]), ".go.buildinfo\x00") {
			continue
		}
		// A 32-byte head (the magic, the pointer size, flags: 2 says the
		// strings follow inline), then the Go version and the module
		// information, each prefixed with its length as a uvarint.
		b := at(off, int(min(size, 1<<16)))
		if len(b) < 32 || string(b[:14]) != "\xff Go buildinf:" || b[15]&2 == 0 {
			return ""
		}
		b = b[32:]
		var mod string
		for range 2 {
			n, w := binary.Uvarint(b)
			if w <= 0 || n > uint64(len(b)-w) {
				return ""
			}
			mod, b = string(b[w:w+int(n)]), b[w+int(n):]
		}
		// Lines of tab-separated fields; "mod PATH VERSION SUM" is the
		// main module.
		for _, l := range strings.Split(mod, "\n") {
			if f := strings.Split(l, "\t"); len(f) >= 3 && f[0] == "mod" {
				return f[2]
			}
		}
		return ""
	}
	return ""
}
