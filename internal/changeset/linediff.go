package changeset

import (
	"bytes"
	"hash/maphash"
)

// This file holds the line diff: Myers' O(ND) algorithm in its linear
// space form (a forward and a backward search meet on a middle snake and
// the two halves are solved recursively), with two bounds that keep
// pathological inputs fast: a search that runs past costLimit steps splits
// at the furthest point it reached instead of the optimum, and once the
// whole diff has spent its budget the remaining ranges are reported as
// replaced wholesale. Either way the result is a correct edit script,
// only not always the shortest.

// text is one side of a diff: the data split into lines, each with its
// terminating newline (the last one may lack it).
type text struct {
	data []byte
	off  []int // line i is data[off[i]:off[i+1]]
}

func (t *text) split(data []byte) {
	t.data = data
	t.off = append(t.off[:0], 0)
	for i := 0; i < len(data); {
		j := bytes.IndexByte(data[i:], '\n')
		if j < 0 {
			i = len(data)
		} else {
			i += j + 1
		}
		t.off = append(t.off, i)
	}
}

func (t *text) n() int            { return len(t.off) - 1 }
func (t *text) line(i int) []byte { return t.data[t.off[i]:t.off[i+1]] }

// countLines counts the lines of data, a last line without newline included.
func countLines(data []byte) int {
	n := bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// differ holds the working memory of line diffs; one per goroutine, reused.
type differ struct {
	a, b   text
	ia, ib []int32 // line ids: equal lines, equal ids
	ca, cb []bool  // changed lines
	v      []int   // forward and backward furthest-reaching x per diagonal
	ids    map[uint64]int32
	first  []int32 // for each id, a line holding it: line k of a when k >= 0, line -k-1 of b otherwise
	seed   maphash.Seed
	seeded bool
	budget int
	limit  int // steps of one middle-snake search; 0: chosen from the sizes (tests set it)
}

// edit is a run of changes: lines a[i0:i1] replaced by b[j0:j1].
type edit struct{ i0, i1, j0, j1 int }

const (
	costLimitMin = 1024     // steps of one middle-snake search before it settles for a good split
	diffBudget   = 50e6     // snake steps for one whole diff before the rest is replaced wholesale
	maxTextSize  = 32 << 20 // larger files are shown as binary
	binarySniff  = 8000     // bytes searched for a NUL
)

// diff compares old and new and returns the edits, in order.
func (d *differ) diff(old, new []byte, out []edit) []edit {
	d.a.split(old)
	d.b.split(new)
	n, m := d.a.n(), d.b.n()
	d.ia = grow(d.ia, n)
	d.ib = grow(d.ib, m)
	d.ca = growBool(d.ca, n)
	d.cb = growBool(d.cb, m)
	d.intern()
	if d.budget = diffBudget; d.limit > 0 {
		d.budget = d.limit * 64
	}
	d.compare(0, n, 0, m)
	out = out[:0]
	i, j := 0, 0
	for i < n || j < m {
		if i < n && j < m && !d.ca[i] && !d.cb[j] {
			i++
			j++
			continue
		}
		e := edit{i0: i, j0: j}
		for i < n && d.ca[i] {
			i++
		}
		for j < m && d.cb[j] {
			j++
		}
		e.i1, e.j1 = i, j
		out = append(out, e)
	}
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growBool(s []bool, n int) []bool {
	if cap(s) < n {
		return make([]bool, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// intern gives equal lines equal ids.
func (d *differ) intern() {
	if !d.seeded {
		d.seed = maphash.MakeSeed()
		d.seeded = true
	}
	if d.ids == nil {
		d.ids = make(map[uint64]int32)
	}
	clear(d.ids)
	d.first = d.first[:0]
	assign := func(t *text, ids []int32, side int) {
		for i := range ids {
			l := t.line(i)
			h := maphash.Bytes(d.seed, l)
			id, ok := d.ids[h]
			if !ok || !bytes.Equal(d.lineOf(id), l) {
				// A new line, or a hash collision: a line of its own.
				id = int32(len(d.first))
				d.first = append(d.first, int32(side*i+(side-1)/2))
				if !ok {
					d.ids[h] = id
				}
			}
			ids[i] = id
		}
	}
	assign(&d.a, d.ia, 1)
	assign(&d.b, d.ib, -1)
}

func (d *differ) lineOf(id int32) []byte {
	k := d.first[id]
	if k >= 0 {
		return d.a.line(int(k))
	}
	return d.b.line(int(-k - 1))
}

// compare marks the changed lines of a[xoff:xlim] and b[yoff:ylim].
func (d *differ) compare(xoff, xlim, yoff, ylim int) {
	a, b := d.ia, d.ib
	for xoff < xlim && yoff < ylim && a[xoff] == b[yoff] {
		xoff++
		yoff++
	}
	for xlim > xoff && ylim > yoff && a[xlim-1] == b[ylim-1] {
		xlim--
		ylim--
	}
	if xoff == xlim || yoff == ylim || d.budget <= 0 {
		for x := xoff; x < xlim; x++ {
			d.ca[x] = true
		}
		for y := yoff; y < ylim; y++ {
			d.cb[y] = true
		}
		return
	}
	x, y := d.split(xoff, xlim, yoff, ylim)
	if (x == xoff && y == yoff) || (x == xlim && y == ylim) {
		// No progress (only after a bounded search): replace wholesale.
		d.budget = 0
		d.compare(xoff, xlim, yoff, ylim)
		return
	}
	d.compare(xoff, x, yoff, y)
	d.compare(x, xlim, y, ylim)
}

// split finds a point (x, y) where an edit script of a[xoff:xlim] into
// b[yoff:ylim] can be cut in two: on the middle snake of a shortest one,
// or, when that costs too much, on the furthest point reached.
// Diagonal k holds the points with x - y == k; fd and bd keep, for each
// diagonal, the furthest x reached forward (from the top left) and
// backward (from the bottom right).
func (d *differ) split(xoff, xlim, yoff, ylim int) (int, int) {
	a, b := d.ia, d.ib
	n, m := len(a), len(b)
	size := n + m + 3
	if cap(d.v) < 2*size {
		d.v = make([]int, 2*size)
	}
	base := m + 1 // index of diagonal 0
	fd := d.v[:size]
	bd := d.v[size : 2*size]
	dmin, dmax := xoff-ylim, xlim-yoff
	fmid, bmid := xoff-yoff, xlim-ylim
	fmin, fmax, bmin, bmax := fmid, fmid, bmid, bmid
	fd[base+fmid] = xoff
	bd[base+bmid] = xlim
	odd := (fmid-bmid)&1 != 0
	limit := d.limit
	if limit <= 0 {
		limit = costLimitMin
		for s := 1; 1<<(2*s) < n+m && s < 30; s++ {
			limit = max(limit, 1<<s*4)
		}
	}
	const big = int(^uint(0) >> 1)
	for c := 1; ; c++ {
		// One more step forward.
		if fmin > dmin {
			fmin--
			fd[base+fmin-1] = -1
		} else {
			fmin++
		}
		if fmax < dmax {
			fmax++
			fd[base+fmax+1] = -1
		} else {
			fmax--
		}
		for k := fmax; k >= fmin; k -= 2 {
			lo, hi := fd[base+k-1], fd[base+k+1]
			x := hi
			if lo >= hi {
				x = lo + 1
			}
			y := x - k
			x0 := x
			for x < xlim && y < ylim && a[x] == b[y] {
				x++
				y++
			}
			d.budget -= x - x0 + 1
			fd[base+k] = x
			if odd && bmin <= k && k <= bmax && bd[base+k] <= x {
				return x, y
			}
		}
		// One more step backward.
		if bmin > dmin {
			bmin--
			bd[base+bmin-1] = big
		} else {
			bmin++
		}
		if bmax < dmax {
			bmax++
			bd[base+bmax+1] = big
		} else {
			bmax--
		}
		for k := bmax; k >= bmin; k -= 2 {
			lo, hi := bd[base+k-1], bd[base+k+1]
			x := hi - 1
			if lo < hi {
				x = lo
			}
			y := x - k
			x0 := x
			for x > xoff && y > yoff && a[x-1] == b[y-1] {
				x--
				y--
			}
			d.budget -= x0 - x + 1
			bd[base+k] = x
			if !odd && fmin <= k && k <= fmax && x <= fd[base+k] {
				return x, y
			}
		}
		if c < limit && d.budget > 0 {
			continue
		}
		// Too expensive: cut at the point that got furthest.
		return furthest(fd[base+fmin:base+fmax+1], bd[base+bmin:base+bmax+1], fmin, bmin, xoff, yoff, xlim, ylim)
	}
}

// furthest is where split cuts a search that cost too much: the point on
// the forward diagonals fmin.. (their x in fd, every other one used) or
// the backward ones bmin.. (bd) that got furthest from its start, within
// the box from (xoff, yoff) to (xlim, ylim).
func furthest(fd, bd []int, fmin, bmin, xoff, yoff, xlim, ylim int) (int, int) {
	const big = int(^uint(0) >> 1)
	fx, fy, fbest := xoff, yoff, -1
	for i := len(fd) - 1; i >= 0; i -= 2 {
		k := fmin + i
		x := min(fd[i], xlim)
		y := x - k
		if y > ylim {
			x, y = ylim+k, ylim
		}
		if x+y > fbest {
			fbest, fx, fy = x+y, x, y
		}
	}
	bx, by, bbest := xlim, ylim, big
	for i := len(bd) - 1; i >= 0; i -= 2 {
		k := bmin + i
		x := max(xoff, bd[i])
		y := x - k
		if y < yoff {
			x, y = yoff+k, yoff
		}
		if x+y < bbest {
			bbest, bx, by = x+y, x, y
		}
	}
	if fbest-(xoff+yoff) >= (xlim+ylim)-bbest {
		return fx, fy
	}
	return bx, by
}
