package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// maxMessage bounds one message to what a SOCK_SEQPACKET socket carries
// without raising the socket buffer beyond an unprivileged user's limit.
const maxMessage = 200 * 1024

// maxLandlockRules is MAXLLRULES in initc/init.c.
const maxLandlockRules = 256

// ErrTooLarge is returned when a config or command does not fit a message.
var ErrTooLarge = errors.New("arguments and environment too large for the sandbox (limit 200 KiB)")

type encoder struct{ b []byte }

func newEncoder(typ uint32) *encoder {
	e := &encoder{b: make([]byte, 8, 4096)}
	binary.NativeEndian.PutUint32(e.b, typ)
	return e
}

func (e *encoder) rec(tag uint16, data []byte) {
	var h [8]byte
	binary.NativeEndian.PutUint16(h[0:], tag)
	binary.NativeEndian.PutUint32(h[4:], uint32(len(data)))
	e.b = append(e.b, h[:]...)
	e.b = append(e.b, data...)
	for len(e.b)%4 != 0 {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) str(tag uint16, s string) {
	e.rec(tag, append([]byte(s), 0))
}

func (e *encoder) flag(tag uint16) { e.rec(tag, nil) }

func (e *encoder) u32s(tag uint16, v ...uint32) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint32(b[4*i:], x)
	}
	e.rec(tag, b)
}

func (e *encoder) u64(tag uint16, v uint64) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	e.rec(tag, b[:])
}

func (e *encoder) bytes() ([]byte, error) {
	if len(e.b) > maxMessage {
		return nil, ErrTooLarge
	}
	binary.NativeEndian.PutUint32(e.b[4:], uint32(len(e.b)-8))
	return e.b, nil
}

// opString encodes one op string: u32 length then bytes. Paths carry a NUL;
// file content (Op.A of OpMkfile) is sent as is.
func opString(b []byte, s string, nul bool) []byte {
	n := len(s)
	if n > 0 && nul {
		n++
	}
	b = binary.NativeEndian.AppendUint32(b, uint32(n))
	b = append(b, s...)
	if n > 0 && nul {
		b = append(b, 0)
	}
	return b
}

func encodeOp(op *Op) []byte {
	b := make([]byte, 32, 64+len(op.A)+len(op.B)+len(op.C)+len(op.D))
	binary.NativeEndian.PutUint32(b[0:], op.Kind)
	binary.NativeEndian.PutUint32(b[4:], op.Flags)
	binary.NativeEndian.PutUint64(b[8:], op.MountFlags)
	binary.NativeEndian.PutUint64(b[16:], op.Attr)
	binary.NativeEndian.PutUint32(b[24:], op.Mode)
	b = opString(b, op.A, op.Kind != OpMkfile)
	b = opString(b, op.B, true)
	b = opString(b, op.C, true)
	return opString(b, op.D, true)
}

// EncodeSpawn returns the M_SPAWN message for s.
func EncodeSpawn(s *SpawnConfig) ([]byte, error) {
	e := newEncoder(msgSpawn)
	e.u64(cNSFlags, s.Namespaces)
	if s.UIDMap != "" {
		e.str(cUIDMap, s.UIDMap)
		e.str(cGIDMap, s.GIDMap)
	}
	if s.SetgroupsDeny {
		e.str(cSetgroups, "deny")
	}
	if s.InitID != nil {
		e.u32s(cInitID, s.InitID.UID, s.InitID.GID)
	}
	if s.Trace {
		e.flag(cTrace)
	}
	if s.NoMPTCP {
		e.flag(cNoMPTCP)
	}
	for _, f := range s.CgroupSelf {
		e.str(cCgroupSelf, f)
	}
	if t := s.TUN; t != nil {
		b := make([]byte, 52)
		binary.NativeEndian.PutUint32(b[0:], t.MTU)
		var flags uint32
		if t.DefaultRoutes {
			flags |= tunRoute4
		}
		if t.Addr6 != nil {
			flags |= tunAddr6
			if t.DefaultRoutes {
				flags |= tunRoute6
			}
			copy(b[16:32], t.Addr6[:])
			binary.NativeEndian.PutUint32(b[32:], t.Prefix6)
		}
		binary.NativeEndian.PutUint32(b[4:], flags)
		copy(b[8:12], t.Addr4[:])
		binary.NativeEndian.PutUint32(b[12:], t.Prefix4)
		copy(b[36:51], t.Name)
		e.rec(cTUN, b)
	}
	return e.bytes()
}

// EncodeConfig returns the M_CONFIG message for c (without c.SpawnConfig).
func EncodeConfig(c *Config) ([]byte, error) {
	if c.Scratch == "" {
		return nil, errors.New("config has no scratch directory")
	}
	e := newEncoder(msgConfig)
	for _, cg := range c.Cgroups {
		e.str(cCgroup, cg)
	}
	if c.IDMapUID != "" {
		e.rec(cIDMap, []byte(c.IDMapUID+"\x00"+c.IDMapGID+"\x00"))
	}
	for i := range c.Ops {
		e.rec(cOp, encodeOp(&c.Ops[i]))
	}
	if c.Hostname != "" {
		e.str(cHostname, c.Hostname)
	}
	e.str(cScratch, c.Scratch)
	if c.LoopbackUp {
		e.flag(cLoUp)
	}
	if len(c.Seccomp) > 0 {
		e.rec(cSeccomp, c.Seccomp)
	}
	e.u64(cCaps, c.Caps)
	e.u32s(cCapLast, c.CapLast)
	for _, r := range c.Rlimits {
		b := make([]byte, 24)
		binary.NativeEndian.PutUint32(b, r.Resource)
		binary.NativeEndian.PutUint64(b[8:], r.Cur)
		binary.NativeEndian.PutUint64(b[16:], r.Max)
		e.rec(cRlimit, b)
	}
	if c.User != nil {
		e.u32s(cUser, c.User.UID, c.User.GID)
		e.u32s(cGroups, c.Groups...)
	}
	if c.RootReadOnly {
		e.flag(cRootRO)
	}
	if c.TmpCheck != "" {
		e.str(cTmpCheck, c.TmpCheck)
	}
	if c.NoNewPrivs {
		e.flag(cNNP)
	}
	if l := c.Landlock; l != nil {
		if !c.NoNewPrivs {
			return nil, errors.New("landlock needs no_new_privs")
		}
		if len(l.Rules) > maxLandlockRules {
			return nil, fmt.Errorf("%d Landlock rules, more than the init takes (%d)", len(l.Rules), maxLandlockRules)
		}
		var b [16]byte
		binary.NativeEndian.PutUint64(b[0:], l.HandledFS)
		binary.NativeEndian.PutUint64(b[8:], l.HandledNet)
		e.rec(cLandlock, b[:])
		for _, r := range l.Rules {
			e.rec(cLLRule, append(binary.NativeEndian.AppendUint64(nil, r.Access), append([]byte(r.Path), 0)...))
		}
	}
	return e.bytes()
}

// EncodeExec returns the M_EXEC message for x.
func EncodeExec(x *Exec) ([]byte, error) {
	if len(x.Args) == 0 {
		return nil, errors.New("no command")
	}
	if x.TTY == nil && len(x.Stdio) != 0 && len(x.Stdio) != 3 {
		return nil, fmt.Errorf("need 3 stdio descriptors, have %d", len(x.Stdio))
	}
	e := newEncoder(msgExec)
	for _, a := range x.Args {
		e.str(eArg, a)
	}
	for _, v := range x.Env {
		e.str(eEnv, v)
	}
	if x.Dir != "" {
		e.str(eCwd, x.Dir)
	}
	if x.TTY != nil {
		var b [4]byte
		binary.NativeEndian.PutUint16(b[0:], x.TTY.Rows)
		binary.NativeEndian.PutUint16(b[2:], x.TTY.Cols)
		e.rec(eTTY, b[:])
	} else if len(x.Stdio) == 3 {
		e.u32s(eFDs, 3)
	}
	if x.Setsid {
		e.flag(eSetsid)
	}
	return e.bytes()
}

// Setup steps reported by the init (ST_* in initc/proto.h).
var stepNames = [...]string{
	1: "reading the sandbox config", 2: "creating namespaces", 3: "writing setgroups",
	4: "writing the uid map", 5: "writing the gid map", 6: "joining cgroup",
	7: "creating the idmap user namespace", 8: "cloning mount", 9: "idmapping mount",
	10: "switching ids", 11: "making mounts private", 12: "mounting the staging root",
	13: "pivoting into the new root", 14: "building the root", 15: "detaching the host root",
	16: "making the root read-only", 17: "setting the hostname", 18: "bringing up loopback",
	19: "reading the command", 20: "allocating a terminal", 21: "changing directory",
	22: "setting resource limits", 23: "dropping capabilities", 24: "setting groups",
	25: "switching user", 26: "setting no_new_privs", 27: "installing the seccomp filter",
	28: "executing", 29: "starting the command", 30: "setting up stdio", 31: "creating the network device",
	32: "opening the app image for its mount", 33: "applying the Landlock ruleset",
}

// Step numbers callers branch on.
const (
	StepFuse = 32
	StepOp   = 14
	StepExec = 28
	// StepLandlock is making or applying the Landlock ruleset.
	StepLandlock = 33
)

// SetupError is a failure the init reported while building the sandbox or
// starting the command.
type SetupError struct {
	Step   int
	Errno  syscall.Errno
	Op     *Op    // the failing op for StepOp
	Detail string // a path or name the step was working on
}

func (e *SetupError) Error() string {
	what := "setting up the sandbox"
	if e.Step > 0 && e.Step < len(stepNames) {
		what = stepNames[e.Step]
	}
	if e.Op != nil && e.Op.What != "" {
		what = e.Op.What
	} else if e.Detail != "" {
		what += " " + e.Detail
	}
	return what + ": " + e.Errno.Error()
}

func (e *SetupError) Unwrap() error { return e.Errno }

func decodeError(p []byte, c *Config) *SetupError {
	if len(p) < 12 {
		return &SetupError{Errno: syscall.EPROTO}
	}
	e := &SetupError{
		Step:  int(binary.NativeEndian.Uint32(p)),
		Errno: syscall.Errno(binary.NativeEndian.Uint32(p[4:])),
	}
	op := int(int32(binary.NativeEndian.Uint32(p[8:])))
	if d := p[12:]; len(d) > 0 {
		if i := indexNUL(d); i >= 0 {
			d = d[:i]
		}
		e.Detail = string(d)
	}
	if c != nil && op >= 0 && op < len(c.Ops) {
		e.Op = &c.Ops[op]
	}
	return e
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
