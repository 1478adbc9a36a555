package capability

import (
	"encoding/binary"
	"errors"
	"io"
)

// A small reader of the dynamic section of an ELF object: the DT_NEEDED
// and DT_SONAME entries are all inference needs, and debug/elf would add
// its DWARF and compression packages' start-up to every pinfold command.

// ELF constants used here.
const (
	etExec    = 2
	etDyn     = 3
	ptLoad    = 1
	ptDynamic = 2
	dtNull    = 0
	dtNeeded  = 1
	dtStrtab  = 5
	dtStrsz   = 10
	dtSoname  = 14

	elfMaxPhnum  = 4096
	elfMaxDyn    = 1 << 20
	elfMaxStrtab = 8 << 20
)

var errNotELF = errors.New("not an ELF object this reader understands")

// dynInfo is what an object's dynamic section says.
type dynInfo struct {
	machine uint16
	typ     uint16
	needed  []string
	soname  string
}

type segment struct{ typ, off, vaddr, filesz uint64 }

// readDynamic reads the dynamic section of the ELF object in r.
func readDynamic(r io.ReaderAt) (dynInfo, error) {
	var d dynInfo
	var id [16]byte
	if _, err := r.ReadAt(id[:], 0); err != nil || string(id[:4]) != "\x7fELF" {
		return d, errNotELF
	}
	is64 := id[4] == 2
	if id[4] != 1 && id[4] != 2 {
		return d, errNotELF
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch id[5] {
	case 1:
	case 2:
		bo = binary.BigEndian
	default:
		return d, errNotELF
	}
	hdr := make([]byte, 64)
	n := 52
	if is64 {
		n = 64
	}
	if _, err := r.ReadAt(hdr[:n], 0); err != nil {
		return d, errNotELF
	}
	d.typ, d.machine = bo.Uint16(hdr[16:]), bo.Uint16(hdr[18:])
	var phoff uint64
	var phentsize, phnum int
	if is64 {
		phoff, phentsize, phnum = bo.Uint64(hdr[32:]), int(bo.Uint16(hdr[54:])), int(bo.Uint16(hdr[56:]))
	} else {
		phoff, phentsize, phnum = uint64(bo.Uint32(hdr[28:])), int(bo.Uint16(hdr[42:])), int(bo.Uint16(hdr[44:]))
	}
	if phnum == 0 || phnum > elfMaxPhnum || phentsize < 32 || phentsize > 256 {
		return d, errNotELF
	}
	ph := make([]byte, phnum*phentsize)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return d, errNotELF
	}
	var segs []segment
	var dyn *segment
	for i := 0; i < phnum; i++ {
		p := ph[i*phentsize:]
		var s segment
		if is64 {
			s = segment{uint64(bo.Uint32(p)), bo.Uint64(p[8:]), bo.Uint64(p[16:]), bo.Uint64(p[32:])}
		} else {
			s = segment{uint64(bo.Uint32(p)), uint64(bo.Uint32(p[4:])), uint64(bo.Uint32(p[8:])), uint64(bo.Uint32(p[16:]))}
		}
		segs = append(segs, s)
		if s.typ == ptDynamic {
			dyn = &segs[len(segs)-1]
		}
	}
	if dyn == nil {
		return d, nil // static: needs nothing
	}
	if dyn.filesz > elfMaxDyn {
		return d, errNotELF
	}
	raw := make([]byte, dyn.filesz)
	if _, err := r.ReadAt(raw, int64(dyn.off)); err != nil {
		return d, errNotELF
	}
	entSize := 8
	if is64 {
		entSize = 16
	}
	var strtab, strsz uint64
	var needed []uint64
	soname := ^uint64(0)
	for i := 0; i+entSize <= len(raw); i += entSize {
		var tag, val uint64
		if is64 {
			tag, val = bo.Uint64(raw[i:]), bo.Uint64(raw[i+8:])
		} else {
			tag, val = uint64(bo.Uint32(raw[i:])), uint64(bo.Uint32(raw[i+4:]))
		}
		switch tag {
		case dtNull:
			i = len(raw)
		case dtNeeded:
			needed = append(needed, val)
		case dtSoname:
			soname = val
		case dtStrtab:
			strtab = val
		case dtStrsz:
			strsz = val
		}
	}
	if strsz == 0 || strsz > elfMaxStrtab {
		return d, errNotELF
	}
	// DT_STRTAB is an address: find the file offset of the segment
	// that loads it.
	off := ^uint64(0)
	for _, s := range segs {
		if s.typ == ptLoad && strtab >= s.vaddr && strtab-s.vaddr < s.filesz {
			off = s.off + (strtab - s.vaddr)
			break
		}
	}
	if off == ^uint64(0) {
		return d, errNotELF
	}
	strs := make([]byte, strsz)
	if _, err := r.ReadAt(strs, int64(off)); err != nil {
		return d, errNotELF
	}
	str := func(o uint64) (string, bool) {
		if o >= uint64(len(strs)) {
			return "", false
		}
		b := strs[o:]
		for i, c := range b {
			if c == 0 {
				return string(b[:i]), true
			}
		}
		return "", false
	}
	for _, o := range needed {
		if s, ok := str(o); ok && s != "" {
			d.needed = append(d.needed, s)
		}
	}
	if s, ok := str(soname); ok {
		d.soname = s
	}
	return d, nil
}
