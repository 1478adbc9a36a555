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
	c, segs, err := readSegments(r, &d)
	if err != nil {
		return d, err
	}
	var dyn *segment
	for i := range segs {
		if segs[i].typ == ptDynamic {
			dyn = &segs[i]
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
	t := c.dynTags(raw)
	if t.strsz == 0 || t.strsz > elfMaxStrtab {
		return d, errNotELF
	}
	// DT_STRTAB is an address: find the file offset of the segment
	// that loads it.
	off := ^uint64(0)
	for _, s := range segs {
		if s.typ == ptLoad && t.strtab >= s.vaddr && t.strtab-s.vaddr < s.filesz {
			off = s.off + (t.strtab - s.vaddr)
			break
		}
	}
	if off == ^uint64(0) {
		return d, errNotELF
	}
	strs := make([]byte, t.strsz)
	if _, err := r.ReadAt(strs, int64(off)); err != nil {
		return d, errNotELF
	}
	for _, o := range t.needed {
		if s, ok := cString(strs, o); ok && s != "" {
			d.needed = append(d.needed, s)
		}
	}
	if s, ok := cString(strs, t.soname); ok {
		d.soname = s
	}
	return d, nil
}

// elfClass is how an ELF object encodes its words.
type elfClass struct {
	is64 bool
	bo   binary.ByteOrder
}

// readSegments reads the ELF header of r (its type and machine into d)
// and its program headers.
func readSegments(r io.ReaderAt, d *dynInfo) (elfClass, []segment, error) {
	var c elfClass
	var id [16]byte
	if _, err := r.ReadAt(id[:], 0); err != nil || string(id[:4]) != "\x7fELF" {
		return c, nil, errNotELF
	}
	c.is64 = id[4] == 2
	if id[4] != 1 && id[4] != 2 {
		return c, nil, errNotELF
	}
	switch id[5] {
	case 1:
		c.bo = binary.LittleEndian
	case 2:
		c.bo = binary.BigEndian
	default:
		return c, nil, errNotELF
	}
	bo := c.bo
	hdr := make([]byte, 64)
	n := 52
	if c.is64 {
		n = 64
	}
	if _, err := r.ReadAt(hdr[:n], 0); err != nil {
		return c, nil, errNotELF
	}
	d.typ, d.machine = bo.Uint16(hdr[16:]), bo.Uint16(hdr[18:])
	var phoff uint64
	var phentsize, phnum int
	if c.is64 {
		phoff, phentsize, phnum = bo.Uint64(hdr[32:]), int(bo.Uint16(hdr[54:])), int(bo.Uint16(hdr[56:]))
	} else {
		phoff, phentsize, phnum = uint64(bo.Uint32(hdr[28:])), int(bo.Uint16(hdr[42:])), int(bo.Uint16(hdr[44:]))
	}
	if phnum == 0 || phnum > elfMaxPhnum || phentsize < 32 || phentsize > 256 {
		return c, nil, errNotELF
	}
	ph := make([]byte, phnum*phentsize)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return c, nil, errNotELF
	}
	segs := make([]segment, 0, phnum)
	for i := 0; i < phnum; i++ {
		p := ph[i*phentsize:]
		if c.is64 {
			segs = append(segs, segment{uint64(bo.Uint32(p)), bo.Uint64(p[8:]), bo.Uint64(p[16:]), bo.Uint64(p[32:])})
		} else {
			segs = append(segs, segment{uint64(bo.Uint32(p)), uint64(bo.Uint32(p[4:])), uint64(bo.Uint32(p[8:])), uint64(bo.Uint32(p[16:]))})
		}
	}
	return c, segs, nil
}

// dynEntries are the entries of a dynamic section pinfold reads: the
// string table's address and size, and offsets into it.
type dynEntries struct {
	needed                []uint64
	soname, strtab, strsz uint64
}

// dynTags reads the entries of the dynamic section raw up to DT_NULL.
func (c elfClass) dynTags(raw []byte) dynEntries {
	t := dynEntries{soname: ^uint64(0)}
	entSize := 8
	if c.is64 {
		entSize = 16
	}
	for i := 0; i+entSize <= len(raw); i += entSize {
		var tag, val uint64
		if c.is64 {
			tag, val = c.bo.Uint64(raw[i:]), c.bo.Uint64(raw[i+8:])
		} else {
			tag, val = uint64(c.bo.Uint32(raw[i:])), uint64(c.bo.Uint32(raw[i+4:]))
		}
		switch tag {
		case dtNull:
			return t
		case dtNeeded:
			t.needed = append(t.needed, val)
		case dtSoname:
			t.soname = val
		case dtStrtab:
			t.strtab = val
		case dtStrsz:
			t.strsz = val
		}
	}
	return t
}

// cString is the NUL-terminated string at offset o of strs.
func cString(strs []byte, o uint64) (string, bool) {
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
