package netpolicy

import (
	"context"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"time"
)

// TCP tuning. The sandbox side is a local kernel over a TUN device: it
// loses nothing unless its buffers are full, so a simple go-back-N sender
// with a fixed initial timeout is enough, and big segments (the 65520-byte
// MTU) keep the per-packet cost low.
const (
	rcvQueueMax = 4 << 20 // bytes from the sandbox not yet written to the host side
	sndBufMax   = 4 << 20 // bytes from the host side not yet acknowledged by the sandbox
	ourWscale   = 7
	initialRTO  = 200 * time.Millisecond
	maxRTO      = 10 * time.Second
	maxRetries  = 12
	dialTimeout = 15 * time.Second
	maxConns    = 8192
	inspectMax  = 16 << 10 // bytes held back to read a TLS SNI or HTTP Host
)

const (
	stDialing = iota // SYN received, connecting on the host side
	stSynRcvd        // SYN-ACK sent
	stSynSent        // published connection: SYN sent to the sandbox
	stEstablished
	stClosed
)

// tcpConn is one TCP connection between the sandbox and a host socket.
type tcpConn struct {
	s    *Stack
	key  flowKey
	mu   sync.Mutex
	cond sync.Cond
	st   int
	up   *os.File
	pkt  []byte // packet buffer, used under mu

	// sandbox -> host
	rcvNxt   uint32
	rq       [][]byte
	rqBytes  int
	rcvFin   bool
	lastWin  int  // window last advertised, in bytes
	wscaled  bool // both sides sent window scale options
	inspect  bool // hold the first bytes back to check SNI / Host
	name     string
	wdone    bool // the writer is done (host side half-closed)
	readDone bool

	// host -> sandbox
	iss, sndUna, sndNxt uint32
	sndWnd              uint32
	wsIn                uint8
	mss                 int
	sb                  []byte // sb[off:] starts at sndUna
	off                 int
	upEOF               bool
	finSent, finAcked   bool
	timer               *time.Timer
	rto                 time.Duration
	retries             int
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func seqLT(a, b uint32) bool { return int32(a-b) < 0 }
func seqLE(a, b uint32) bool { return int32(a-b) <= 0 }

// tcpInput handles one segment from the sandbox.
func (s *Stack) tcpInput(p *packet) {
	seg, ok := parseTCP(p.l4)
	if !ok {
		return
	}
	key := flowKey{netip.AddrPortFrom(p.src, seg.srcPort), netip.AddrPortFrom(p.dst, seg.dstPort)}
	s.mu.Lock()
	c := s.tcp[key]
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	if c == nil {
		if seg.flags&(flagSYN|flagACK|flagRST) == flagSYN {
			s.tcpOpen(key, &seg)
		} else if seg.flags&flagRST == 0 {
			s.reset(key, &seg)
		}
		return
	}
	c.mu.Lock()
	c.input(&seg)
	c.mu.Unlock()
}

// reset answers a segment that belongs to no connection.
func (s *Stack) reset(key flowKey, seg *tcpSeg) {
	var seq, ack uint32
	flags := uint8(flagRST)
	if seg.flags&flagACK != 0 {
		seq = seg.ack
	} else {
		flags |= flagACK
		ack = seg.seq + uint32(len(seg.payload))
		if seg.flags&(flagSYN|flagFIN) != 0 {
			ack++
		}
	}
	buf := make([]byte, 80)
	s.write(tcpPacket(buf, key, seq, ack, flags, 0, nil, nil))
}

// tcpOpen handles a SYN: the policy decides, then pinfold connects on the
// host side and only then accepts the sandbox's connection, so that a
// refused or unreachable destination looks the same inside.
func (s *Stack) tcpOpen(key flowKey, seg *tcpSeg) {
	var d decision
	if key.out.Addr() == DNSAddr || key.out.Addr() == DNSAddr6 {
		if key.out.Port() != 53 {
			d = s.decide("tcp", key.out)
		} else {
			d.ok = true
		}
	} else {
		d = s.decide("tcp", key.out)
	}
	if !d.ok {
		s.violate(d.v)
		s.reset(key, seg)
		return
	}
	c := &tcpConn{s: s, key: key, st: stDialing, rcvNxt: seg.seq + 1, name: d.name,
		iss: rand.Uint32(), mss: int(seg.mss), rto: initialRTO}
	c.cond.L = &c.mu
	if c.mss == 0 {
		c.mss = 536
	}
	c.mss = min(c.mss, MTU-ipHeaderLen(key.in.Addr().Is6())-20)
	if seg.wscale >= 0 {
		c.wscaled, c.wsIn = true, uint8(seg.wscale)
	}
	c.inspect = s.cfg.Mode == Allow && d.name != ""
	c.sndUna, c.sndNxt = c.iss, c.iss
	s.mu.Lock()
	if s.closed { // Close ran after the loop's check and would miss c
		s.mu.Unlock()
		return
	}
	if len(s.tcp) >= maxConns {
		s.mu.Unlock()
		s.reset(key, seg)
		return
	}
	s.tcp[key] = c
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var f *os.File
		var err error
		if key.out.Addr() == DNSAddr || key.out.Addr() == DNSAddr6 {
			f, err = s.dnsStream()
		} else {
			ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
			f, err = dialTCP(ctx, d.to)
			cancel()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.st == stClosed {
			if f != nil {
				f.Close()
			}
			return
		}
		if err != nil {
			c.send(c.iss, flagRST|flagACK, nil)
			c.closeLocked()
			return
		}
		c.up = f
		c.st = stSynRcvd
		c.sndNxt = c.iss + 1
		c.sendSyn(flagSYN | flagACK)
		c.arm()
	}()
}

// connectIn starts a connection to port inside for a published port.
func (s *Stack) connectIn(f *os.File, port uint16) {
	key, ok := s.ephemeral(netip.AddrPortFrom(SandboxAddr, port), HostAddr)
	if !ok {
		f.Close()
		return
	}
	c := &tcpConn{s: s, key: key, st: stSynSent, up: f, iss: rand.Uint32(),
		mss: MTU - 40, rto: initialRTO, wscaled: true}
	c.cond.L = &c.mu
	c.sndUna, c.sndNxt = c.iss, c.iss+1
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.Close()
		return
	}
	s.tcp[key] = c
	s.mu.Unlock()
	c.mu.Lock()
	c.sendSyn(flagSYN)
	c.arm()
	c.mu.Unlock()
}

// input handles a segment for c (c.mu held).
func (c *tcpConn) input(seg *tcpSeg) {
	if seg.flags&flagRST != 0 {
		c.closeLocked()
		return
	}
	switch c.st {
	case stDialing:
		return // the SYN-ACK follows once the host side is connected
	case stSynSent:
		if seg.flags&(flagSYN|flagACK) != flagSYN|flagACK || seg.ack != c.iss+1 {
			return
		}
		c.rcvNxt = seg.seq + 1
		c.sndUna = seg.ack
		if seg.mss != 0 {
			c.mss = min(c.mss, int(seg.mss))
		}
		c.wscaled = seg.wscale >= 0
		if c.wscaled {
			c.wsIn = uint8(seg.wscale)
		}
		c.sndWnd = uint32(seg.win) // never scaled in a SYN
		c.establish()
		c.ack()
		return
	case stSynRcvd:
		if seg.flags&flagSYN != 0 { // our SYN-ACK was lost
			c.sendSyn(flagSYN | flagACK)
			return
		}
		if seg.flags&flagACK == 0 || seg.ack != c.iss+1 {
			return
		}
		c.sndUna = seg.ack
		c.establish()
	case stEstablished:
		if seg.flags&flagSYN != 0 {
			// The sandbox has forgotten this connection (its reset was
			// lost, or it reuses the port): an ACK makes it answer with
			// the reset that frees the entry, where silence would leave
			// its new connection hanging (RFC 5961 4.2).
			c.ack()
			return
		}
	case stClosed:
		return
	}
	if seg.flags&flagACK != 0 {
		c.acked(seg)
	}
	if len(seg.payload) > 0 || seg.flags&flagFIN != 0 {
		c.receive(seg)
	} else if seqLT(seg.seq, c.rcvNxt) {
		// A keepalive or zero-window probe (no data, one below rcvNxt):
		// unanswered, the sandbox's kernel times the connection out.
		c.ack()
	}
	c.maybeDone()
}

// establish starts moving data both ways.
func (c *tcpConn) establish() {
	c.st = stEstablished
	c.retries, c.rto = 0, initialRTO
	c.stopTimer()
	c.s.wg.Add(2)
	go c.writer()
	go c.reader()
}

// acked processes the acknowledgment and window of seg.
func (c *tcpConn) acked(seg *tcpSeg) {
	if seqLT(c.sndNxt, seg.ack) || seqLT(seg.ack, c.sndUna) {
		return
	}
	wnd := uint32(seg.win)
	if c.wscaled {
		wnd <<= c.wsIn
	}
	c.sndWnd = wnd
	if c.sndNxt == c.sndUna {
		// Nothing in flight: this answers a window probe. A sandbox that
		// answers is alive, however long its window stays closed (RFC
		// 1122 4.2.2.17), so only unanswered probes count as retries.
		c.retries = 0
	}
	if n := seg.ack - c.sndUna; n > 0 {
		data := uint32(len(c.sb) - c.off)
		if n > data { // the FIN
			c.finAcked = true
			n = data
		}
		c.off += int(n)
		if c.off == len(c.sb) {
			c.sb, c.off = c.sb[:0], 0
		} else if c.off > 1<<20 && c.off > len(c.sb)/2 {
			c.sb = c.sb[:copy(c.sb, c.sb[c.off:])]
			c.off = 0
		}
		c.sndUna = seg.ack
		c.retries, c.rto = 0, initialRTO
		c.stopTimer()
		c.cond.Broadcast()
	}
	c.push()
	// push arms the timer only for what it sends: data or a FIN still in
	// flight from before needs it too, or its loss is never repaired
	// (RFC 6298 5.3).
	if c.sndNxt != c.sndUna {
		c.arm()
	}
}

// receive queues the sandbox's data for the host side and acknowledges it.
func (c *tcpConn) receive(seg *tcpSeg) {
	data := seg.payload
	seq := seg.seq
	if seq != c.rcvNxt {
		if !seqLT(seq, c.rcvNxt) || seqLE(seq+uint32(len(data)), c.rcvNxt) && seg.flags&flagFIN == 0 {
			c.ack() // out of order or a duplicate: say where we are
			return
		}
		skip := c.rcvNxt - seq
		if int(skip) > len(data) {
			c.ack()
			return
		}
		data = data[skip:]
	}
	if c.rcvFin {
		c.ack()
		return
	}
	take := min(len(data), rcvQueueMax-c.rqBytes)
	for rest := data[:take]; len(rest) > 0; {
		// Small segments fill the last buffer rather than take a 64 KiB
		// one each: the window counts bytes, not buffers, so a sandbox
		// sending single bytes would otherwise pin 64 KiB per byte.
		if i := len(c.rq) - 1; i >= 0 && len(c.rq[i]) < cap(c.rq[i]) {
			n := min(len(rest), cap(c.rq[i])-len(c.rq[i]))
			c.rq[i] = append(c.rq[i], rest[:n]...)
			rest = rest[n:]
			continue
		}
		bp := bufPool.Get().(*[]byte)
		n := min(len(rest), cap(*bp))
		b := append((*bp)[:0], rest[:n]...)
		c.rq = append(c.rq, b)
		rest = rest[n:]
	}
	c.rqBytes += take
	c.rcvNxt += uint32(take)
	if take == len(data) && seg.flags&flagFIN != 0 {
		c.rcvNxt++
		c.rcvFin = true
	}
	c.cond.Broadcast()
	c.ack()
}

// window is the receive window to advertise, in bytes.
func (c *tcpConn) window() int {
	return max(rcvQueueMax-c.rqBytes, 0)
}

// ack sends a bare acknowledgment with the current window.
func (c *tcpConn) ack() {
	c.send(c.sndNxt, flagACK, nil)
}

// push sends what the window allows, then the FIN once the host side has
// finished.
func (c *tcpConn) push() {
	if c.st != stEstablished {
		return
	}
	for !c.finSent {
		inflight := int(c.sndNxt - c.sndUna)
		avail := len(c.sb) - c.off - inflight
		if avail <= 0 {
			if c.upEOF {
				c.send(c.sndNxt, flagFIN|flagACK, nil)
				c.sndNxt++
				c.finSent = true
				c.arm()
			}
			return
		}
		wnd := int(c.sndWnd) - inflight
		if wnd <= 0 {
			c.arm() // probes the zero window
			return
		}
		n := min(avail, wnd, c.mss)
		start := c.off + inflight
		c.send(c.sndNxt, flagACK|flagPSH, c.sb[start:start+n])
		c.sndNxt += uint32(n)
		c.arm()
	}
}

// send writes one segment to the sandbox.
func (c *tcpConn) send(seq uint32, flags uint8, data []byte) {
	if c.pkt == nil {
		c.pkt = make([]byte, MTU+64)
	}
	win := c.window()
	c.lastWin = win
	if c.wscaled {
		win >>= ourWscale
	}
	c.s.write(tcpPacket(c.pkt, c.key, seq, c.rcvNxt, flags, uint16(min(win, 0xffff)), nil, data))
}

// sendSyn sends a SYN or SYN-ACK with our options.
func (c *tcpConn) sendSyn(flags uint8) {
	opts := []byte{2, 4, 0, 0, 1, 3, 3, ourWscale}
	be.PutUint16(opts[2:], uint16(MTU-ipHeaderLen(c.key.in.Addr().Is6())-20))
	if !c.wscaled {
		opts = opts[:4]
	}
	if c.pkt == nil {
		c.pkt = make([]byte, MTU+64)
	}
	ack := c.rcvNxt
	if flags&flagACK == 0 {
		ack = 0
	}
	c.s.write(tcpPacket(c.pkt, c.key, c.iss, ack, flags, uint16(min(c.window(), 0xffff)), opts, nil))
}

// tcpPacket builds a segment from key.out to key.in in buf.
func tcpPacket(buf []byte, key flowKey, seq, ack uint32, flags uint8, win uint16, opts, data []byte) []byte {
	src, dst := key.out.Addr(), key.in.Addr()
	hl := ipHeaderLen(dst.Is6())
	tl := 20 + len(opts)
	n := hl + tl + len(data)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	t := buf[hl:]
	be.PutUint16(t[0:], key.out.Port())
	be.PutUint16(t[2:], key.in.Port())
	be.PutUint32(t[4:], seq)
	be.PutUint32(t[8:], ack)
	t[12] = byte(tl/4) << 4
	t[13] = flags
	be.PutUint16(t[14:], win)
	t[16], t[17], t[18], t[19] = 0, 0, 0, 0
	copy(t[20:], opts)
	copy(t[tl:], data)
	be.PutUint16(t[16:], l4Checksum(src, dst, protoTCP, t))
	writeIP(buf, src, dst, protoTCP, tl+len(data))
	return buf
}

// arm starts the retransmission timer unless it runs.
func (c *tcpConn) arm() {
	if c.timer == nil {
		c.timer = time.AfterFunc(c.rto, c.expire)
	}
}

func (c *tcpConn) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// expire retransmits from the oldest unacknowledged byte (go-back-N).
func (c *tcpConn) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	if c.st == stClosed {
		return
	}
	c.retries++
	if c.retries > maxRetries {
		c.send(c.sndNxt, flagRST|flagACK, nil)
		c.closeLocked()
		return
	}
	c.rto = min(c.rto*2, maxRTO)
	switch c.st {
	case stSynRcvd:
		c.sendSyn(flagSYN | flagACK)
		c.arm()
		return
	case stSynSent:
		c.sendSyn(flagSYN)
		c.arm()
		return
	}
	if c.sndNxt == c.sndUna && !c.finSent {
		// Nothing in flight: the window is closed. A bare ACK below
		// the window makes the sandbox say what its window is now.
		if len(c.sb)-c.off > 0 {
			c.send(c.sndNxt-1, flagACK, nil)
			c.arm()
		}
		return
	}
	c.sndNxt = c.sndUna
	if c.finSent && !c.finAcked {
		c.finSent = false
	}
	c.push()
}

// writer copies the sandbox's data to the host side.
func (c *tcpConn) writer() {
	defer c.s.wg.Done()
	var held []byte // first bytes kept back for the SNI / Host check
	for {
		c.mu.Lock()
		for len(c.rq) == 0 && !c.rcvFin && c.st != stClosed {
			c.cond.Wait()
		}
		if c.st == stClosed {
			c.mu.Unlock()
			return
		}
		if len(c.rq) == 0 { // FIN, all written
			up := c.up
			c.mu.Unlock()
			if len(held) > 0 {
				if !c.check(held) {
					return
				}
				up.Write(held)
			}
			closeWrite(up)
			c.mu.Lock()
			c.wdone = true
			c.maybeDone()
			c.mu.Unlock()
			return
		}
		b := c.rq[0]
		c.rq[0] = nil
		c.rq = c.rq[1:]
		inspect, up := c.inspect, c.up
		c.mu.Unlock()
		out := b
		if inspect {
			held = append(held, b...)
			if _, more := peekName(held); more && len(held) < inspectMax {
				c.freed(b)
				continue
			}
			if !c.check(held) {
				return
			}
			c.mu.Lock()
			c.inspect = false
			c.mu.Unlock()
			out, held = held, nil
		}
		_, err := up.Write(out)
		c.freed(b)
		if err != nil {
			c.mu.Lock()
			if c.st != stClosed {
				c.send(c.sndNxt, flagRST|flagACK, nil)
				c.closeLocked()
			}
			c.mu.Unlock()
			return
		}
	}
}

// check applies the allow list to the name in the first bytes, if any.
func (c *tcpConn) check(first []byte) bool {
	name, _ := peekName(first)
	if _, err := netip.ParseAddr(name); name == "" || err == nil {
		return true // no name, or an address the policy already allowed
	}
	ok, rule, reason := c.s.nameVerdict(name)
	if ok {
		return true
	}
	c.s.violate(Violation{Kind: "tcp", Name: name, Addr: c.key.out.String(), Rule: rule,
		Reason: "TLS server name or HTTP Host " + reason + " (the address was resolved for " + c.name + ")"})
	c.mu.Lock()
	if c.st != stClosed {
		c.send(c.sndNxt, flagRST|flagACK, nil)
		c.closeLocked()
	}
	c.mu.Unlock()
	return false
}

// freed returns a written buffer and reopens the window.
func (c *tcpConn) freed(b []byte) {
	c.mu.Lock()
	c.rqBytes -= len(b)
	// Tell the sandbox once a nearly closed window has room again.
	if c.st == stEstablished && c.lastWin < rcvQueueMax/4 && c.window() >= rcvQueueMax/2 {
		c.ack()
	}
	c.mu.Unlock()
	b = b[:0]
	bufPool.Put(&b)
}

// reader copies the host side's data to the sandbox.
func (c *tcpConn) reader() {
	defer c.s.wg.Done()
	buf := make([]byte, 256<<10)
	for {
		n, err := c.up.Read(buf)
		c.mu.Lock()
		if n > 0 {
			for len(c.sb)-c.off >= sndBufMax && c.st != stClosed {
				c.cond.Wait()
			}
			if c.st == stClosed {
				c.mu.Unlock()
				return
			}
			c.sb = append(c.sb, buf[:n]...)
			c.push()
		}
		if err != nil {
			if c.st != stClosed {
				if err == io.EOF {
					c.upEOF = true
					c.push()
				} else {
					c.send(c.sndNxt, flagRST|flagACK, nil)
					c.closeLocked()
				}
			}
			c.readDone = true
			c.maybeDone()
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// maybeDone closes c once both directions have finished.
func (c *tcpConn) maybeDone() {
	if c.st == stEstablished && c.finAcked && c.wdone && c.rcvFin {
		c.closeLocked()
	}
}

// closeLocked drops c: its host socket, its timer and its table entry.
func (c *tcpConn) closeLocked() {
	if c.st == stClosed {
		return
	}
	c.st = stClosed
	c.stopTimer()
	if c.up != nil {
		c.up.Close()
	}
	for _, b := range c.rq {
		b = b[:0]
		bufPool.Put(&b)
	}
	c.rq, c.rqBytes = nil, 0
	c.cond.Broadcast()
	c.s.mu.Lock()
	if c.s.tcp[c.key] == c {
		delete(c.s.tcp, c.key)
	}
	c.s.mu.Unlock()
}
