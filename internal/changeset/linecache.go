package changeset

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
)

// The line counts of added files are kept beside each root's upper
// directory (lines.cache), so that a second `diff --stat` of a big
// changeset reads one file instead of every added one. An entry counts
// only while the file's inode, size, modification and change times are
// the ones recorded: any write to the upper file changes its change time.

type lineVal struct {
	ino          uint64
	size         int64
	mtime, ctime int64
	ins          int64
	binary       bool
}

func lineCachePath(r Root) string { return filepath.Join(filepath.Dir(r.Upper), "lines.cache") }

// cacheable reports entries whose --stat line depends on the new file alone.
func cacheable(e *Entry) bool {
	return e.Old == nil && e.New != nil && e.New.Mode.IsRegular()
}

func (v *lineVal) matches(st *Stat) bool {
	return v.ino == st.Ino && v.size == st.Size && v.mtime == st.ModTime.UnixNano() && v.ctime == st.ChangeTime.UnixNano()
}

// loadLineCache reads a root's cache; a missing or damaged file is empty.
func loadLineCache(r Root) map[string]lineVal {
	b, err := os.ReadFile(lineCachePath(r))
	m := map[string]lineVal{}
	if err != nil {
		return m
	}
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint32(b))
		if len(b) < 4+n+41 {
			return map[string]lineVal{}
		}
		p := string(b[4 : 4+n])
		v := b[4+n:]
		m[p] = lineVal{ino: binary.LittleEndian.Uint64(v), size: int64(binary.LittleEndian.Uint64(v[8:])),
			mtime: int64(binary.LittleEndian.Uint64(v[16:])), ctime: int64(binary.LittleEndian.Uint64(v[24:])),
			ins: int64(binary.LittleEndian.Uint64(v[32:])), binary: v[40] == 1}
		b = v[41:]
	}
	return m
}

// saveLineCache replaces a root's cache (through a rename; best effort).
func saveLineCache(r Root, m map[string]lineVal) {
	var b []byte
	for p, v := range m {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
		b = binary.LittleEndian.AppendUint64(b, v.ino)
		b = binary.LittleEndian.AppendUint64(b, uint64(v.size))
		b = binary.LittleEndian.AppendUint64(b, uint64(v.mtime))
		b = binary.LittleEndian.AppendUint64(b, uint64(v.ctime))
		b = binary.LittleEndian.AppendUint64(b, uint64(v.ins))
		bin := byte(0)
		if v.binary {
			bin = 1
		}
		b = append(b, bin)
	}
	path := lineCachePath(r)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) != nil || os.Rename(tmp, path) != nil {
		os.Remove(tmp)
	}
}

// statResults is results() with the line cache for added files.
func statResults(roots []Root, entries []Entry, idx []int, o *DiffOptions) ([]fileResult, error) {
	caches := make([]map[string]lineVal, len(roots))
	res := make([]fileResult, len(idx))
	var miss []int // positions in idx
	for i, k := range idx {
		e := &entries[k]
		if !cacheable(e) {
			miss = append(miss, i)
			continue
		}
		if caches[e.Root] == nil {
			caches[e.Root] = loadLineCache(roots[e.Root])
		}
		if v, ok := caches[e.Root][e.Path]; ok && v.matches(e.New) {
			res[i] = fileResult{binary: v.binary, ins: int(v.ins), newSize: e.New.Size}
			continue
		}
		miss = append(miss, i)
	}
	if len(miss) == 0 {
		return res, nil
	}
	sub := make([]int, len(miss))
	for j, i := range miss {
		sub[j] = idx[i]
	}
	got, err := results(context.Background(), roots, entries, sub, o)
	if err != nil {
		return nil, err
	}
	dirty := make([]bool, len(roots))
	for j, i := range miss {
		res[i] = got[j]
		e := &entries[idx[i]]
		if !cacheable(e) || got[j].err != nil {
			continue
		}
		if caches[e.Root] == nil {
			caches[e.Root] = loadLineCache(roots[e.Root])
		}
		caches[e.Root][e.Path] = lineVal{ino: e.New.Ino, size: e.New.Size, mtime: e.New.ModTime.UnixNano(),
			ctime: e.New.ChangeTime.UnixNano(), ins: int64(got[j].ins), binary: got[j].binary}
		dirty[e.Root] = true
	}
	for r, d := range dirty {
		if d {
			saveLineCache(roots[r], caches[r])
		}
	}
	return res, nil
}
