package capability

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeELF writes a minimal little-endian ELF64 shared object with a
// .dynamic section holding soname (if any) and needed.
func writeELF(t testing.TB, path string, machine elf.Machine, mode os.FileMode, soname string, needed ...string) {
	t.Helper()
	dynstr := []byte{0}
	str := func(s string) uint64 {
		off := len(dynstr)
		dynstr = append(append(dynstr, s...), 0)
		return uint64(off)
	}
	var dyn []elf.Dyn64
	if soname != "" {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_SONAME), Val: str(soname)})
	}
	for _, n := range needed {
		dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_NEEDED), Val: str(n)})
	}
	shstr := []byte("\x00.dynstr\x00.dynamic\x00.shstrtab\x00")

	// Laid out as a linker would: program headers (one PT_LOAD mapping
	// the file at address 0, PT_DYNAMIC), the strings, the dynamic
	// section (DT_STRTAB is an address), then section headers.
	const ehsize, phsize = 64, 2 * 56
	dynstrOff := uint64(ehsize + phsize)
	dyn = append(dyn, elf.Dyn64{Tag: int64(elf.DT_STRTAB), Val: dynstrOff},
		elf.Dyn64{Tag: int64(elf.DT_STRSZ), Val: uint64(len(dynstr))}, elf.Dyn64{Tag: int64(elf.DT_NULL)})
	dynOff := (dynstrOff + uint64(len(dynstr)) + 7) &^ 7
	dynSize := uint64(len(dyn) * 16)
	shstrOff := dynOff + dynSize
	shOff := (shstrOff + uint64(len(shstr)) + 7) &^ 7

	var b bytes.Buffer
	hdr := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Phoff: ehsize, Phnum: 2, Shoff: shOff, Ehsize: ehsize, Phentsize: 56, Shentsize: 64, Shnum: 4, Shstrndx: 3,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	pad := func(to uint64) { b.Write(make([]byte, int(to)-b.Len())) }
	must(binary.Write(&b, binary.LittleEndian, hdr))
	must(binary.Write(&b, binary.LittleEndian, []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: 0, Vaddr: 0, Filesz: shOff, Memsz: shOff, Align: 8},
		{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R), Off: dynOff, Vaddr: dynOff, Filesz: dynSize, Memsz: dynSize, Align: 8},
	}))
	b.Write(dynstr)
	pad(dynOff)
	must(binary.Write(&b, binary.LittleEndian, dyn))
	b.Write(shstr)
	pad(shOff)
	sections := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Off: dynstrOff, Size: uint64(len(dynstr)), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Off: dynOff, Size: dynSize, Link: 1, Addralign: 8, Entsize: 16},
		{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	must(binary.Write(&b, binary.LittleEndian, sections))
	must(os.MkdirAll(filepath.Dir(path), 0o755))
	must(os.WriteFile(path, b.Bytes(), mode))
}

// baseProvides stands for a base with the C and C++ runtimes.
func baseProvides(so string) bool {
	return slices.Contains([]string{"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"}, so)
}

func TestFromELF(t *testing.T) {
	m := elf.Machine(hostMachine())
	other := elf.EM_AARCH64
	if m == other {
		other = elf.EM_X86_64
	}
	dir := t.TempDir()
	site := filepath.Join(dir, ".venv/lib/python3.12/site-packages")
	writeELF(t, filepath.Join(site, "psycopg2/_psycopg.cpython-312-x86_64-linux-gnu.so"), m, 0o755, "", "libpq.so.5", "libc.so.6")
	// numpy's wheel bundles OpenBLAS: the workspace provides what it needs.
	writeELF(t, filepath.Join(site, "numpy/core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so"), m, 0o755, "", "libscipy_openblas64_-99b71e71.so", "libm.so.6")
	writeELF(t, filepath.Join(site, "numpy.libs/libscipy_openblas64_-99b71e71.so"), m, 0o755, "libscipy_openblas64_-99b71e71.so", "libgfortran-040039e1.so.5.0.0")
	writeELF(t, filepath.Join(site, "numpy.libs/libgfortran-040039e1-real.so.5.0.0"), m, 0o755, "", "libc.so.6")
	if err := os.Symlink("libgfortran-040039e1-real.so.5.0.0", filepath.Join(site, "numpy.libs/libgfortran-040039e1.so.5.0.0")); err != nil {
		t.Fatal(err)
	}
	writeELF(t, filepath.Join(site, "vendored/_ext.abi3.so"), m, 0o644, "", "libfoo.so.1")
	writeELF(t, filepath.Join(dir, "node_modules/sharp/build/Release/sharp.node"), m, 0o644, "", "libvips-cpp.so.42", "libstdc++.so.6")
	writeELF(t, filepath.Join(dir, "target/debug/app"), m, 0o755, "", "libssl.so.3", "libcrypto.so.3", "libc.so.6")
	writeELF(t, filepath.Join(dir, "target/release/app"), m, 0o755, "", "libssl.so.3", "libc.so.6")
	// Not scanned: not executable without a library name, another
	// machine, a symlink out of the workspace, a directory that is not an
	// environment, Python's bytecode cache.
	writeELF(t, filepath.Join(dir, "target/debug/app.d"), m, 0o644, "", "libnotexec.so.1")
	writeELF(t, filepath.Join(dir, "target/debug/noexec"), m, 0o644, "", "libnotexec.so.1")
	writeELF(t, filepath.Join(dir, "node_modules/arm/binding.node"), other, 0o644, "", "libother.so.1")
	outside := filepath.Join(t.TempDir(), "evil.so")
	writeELF(t, outside, m, 0o755, "", "libsymlinked.so.1")
	if err := os.Symlink(outside, filepath.Join(dir, "node_modules/evil.so")); err != nil {
		t.Fatal(err)
	}
	writeELF(t, filepath.Join(dir, "lib/plugin.so"), m, 0o755, "", "libelsewhere.so.1")
	writeELF(t, filepath.Join(site, "__pycache__/x.so"), m, 0o755, "", "libcache.so.1")
	writeFile(t, filepath.Join(site, "fake/libfake.so"), "not an ELF file")

	got, err := FromELF(context.Background(), dir, baseProvides)
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{
		{Capability: "", Source: ELF, Evidence: ".venv/lib/python3.12/site-packages/vendored/_ext.abi3.so needs libfoo.so.1"},
		{Capability: "postgres", Source: ELF, Evidence: ".venv/lib/python3.12/site-packages/psycopg2/_psycopg.cpython-312-x86_64-linux-gnu.so needs libpq.so.5"},
		{Capability: "ssl", Source: ELF, Evidence: "target/debug/app needs libcrypto.so.3"},
		{Capability: "ssl", Source: ELF, Evidence: "target/debug/app needs libssl.so.3 (and 1 other file)"},
		{Capability: "vips", Source: ELF, Evidence: "node_modules/sharp/build/Release/sharp.node needs libvips-cpp.so.42"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", dump(got), dump(want))
	}

	// With nothing from the base, the C library shows up too, unmapped.
	got, err = FromELF(context.Background(), dir, nil)
	if err != nil || !slices.Contains(got, Finding{Source: ELF, Evidence: ".venv/lib/python3.12/site-packages/numpy.libs/libgfortran-040039e1-real.so.5.0.0 needs libc.so.6 (and 3 other files)"}) {
		t.Errorf("nil provided: %v\n%s", err, dump(got))
	}
}

// TestFromELFHostLibrary scans a real shared object from the host:
// libpng links zlib.
func TestFromELFHostLibrary(t *testing.T) {
	var src string
	for _, pattern := range []string{"/usr/lib/*/libpng16.so.16", "/lib/*/libpng16.so.16", "/usr/lib64/libpng16.so.16", "/usr/lib/libpng16.so.16"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			src = m[0]
			break
		}
	}
	if src == "" {
		t.Skip("no libpng16.so.16 on this host")
	}
	if f, err := elf.Open(src); err != nil || uint16(f.Machine) != hostMachine() {
		t.Skip("libpng16.so.16 is not for this machine")
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dir := t.TempDir()
	dst := filepath.Join(dir, ".venv/lib/python3.12/site-packages/PIL/libpng16.so.16")
	writeFile(t, dst, "")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()

	got, err := FromELF(context.Background(), dir, func(so string) bool { return so != "libz.so.1" })
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{{Capability: "zlib", Source: ELF, Evidence: ".venv/lib/python3.12/site-packages/PIL/libpng16.so.16 needs libz.so.1"}}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", dump(got), dump(want))
	}
}

func TestFromELFBounds(t *testing.T) {
	m := elf.Machine(hostMachine())
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c", "d"} {
		writeELF(t, filepath.Join(dir, ".venv/lib", "lib"+n+".so"), m, 0o644, "", "libpq.so.5")
	}
	t.Run("objects", func(t *testing.T) {
		got, err := scanELF(context.Background(), dir, nil, bounds{entries: 100, objects: 2, read: 1 << 20})
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("err = %v, want ErrLimit", err)
		}
		want := []Finding{{Capability: "postgres", Source: ELF, Evidence: ".venv/lib/liba.so needs libpq.so.5 (and 1 other file)"}}
		if !slices.Equal(got, want) {
			t.Errorf("got\n%s", dump(got))
		}
	})
	t.Run("entries", func(t *testing.T) {
		if _, err := scanELF(context.Background(), dir, nil, bounds{entries: 3, objects: 100, read: 1 << 20}); !errors.Is(err, ErrLimit) {
			t.Fatalf("err = %v, want ErrLimit", err)
		}
	})
	t.Run("read", func(t *testing.T) {
		got, err := scanELF(context.Background(), dir, nil, bounds{entries: 100, objects: 100, read: 100})
		if err != nil || len(got) != 0 {
			t.Errorf("got %v, %s; want nothing read", err, dump(got))
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := FromELF(ctx, dir, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("no environments", func(t *testing.T) {
		got, err := FromELF(context.Background(), t.TempDir(), nil)
		if err != nil || len(got) != 0 {
			t.Errorf("got %v, %v", got, err)
		}
	})
}
