package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	initp "github.com/pinfold/pinfold/internal/backend/native"
	"github.com/pinfold/pinfold/internal/cgroup"
	"github.com/pinfold/pinfold/internal/netpolicy"
	"github.com/pinfold/pinfold/internal/procstat"
	"github.com/pinfold/pinfold/internal/seccomp"
	"github.com/pinfold/pinfold/internal/store"
	"github.com/pinfold/pinfold/sandbox"
	"github.com/pinfold/pinfold/sandbox/internal/netconf"
	"golang.org/x/sys/unix"
)

// Option configures a Sandbox.
type Option func(*options)

type options struct {
	pool  int
	agent string // pinfold's binary for sessions' agents
	store string // pinfold's store; "" is store.DefaultDir
}

// WithStore keeps what the sandboxes need of pinfold's store (tar, oci
// and debian-12 bases, the shared network helper's socket, launch
// records) in dir rather than in the default store (store.DefaultDir);
// the store is also hidden from the command where a bind would show it.
func WithStore(dir string) Option { return func(o *options) { o.store = dir } }

// WithPool keeps n instances of the sandbox built ahead of time, so Run
// only has to start the command. Each instance serves one command.
func WithPool(n int) Option { return func(o *options) { o.pool = n } }

// Sandbox is a sandbox template; see the package documentation.
type Sandbox struct {
	spec   sandbox.Spec
	store  string // WithStore's, "" for the default
	tmpl   initp.Config
	cgsys  *cgroup.System
	limits cgroup.Limits
	name   string // prefix of cgroup names: "<pid>-<starttime>"
	seq    atomic.Uint64
	net    *netpolicy.Config // nil: no userspace network stack
	// releaseBase ends the mark that keeps a store base from removal.
	releaseBase func()

	// pre is an init spawned by New while it was still preparing the
	// config, taken by the first Run.
	pre     chan spawned
	preUsed atomic.Bool
	ids     idPlan
	pool    chan *instance
	closing chan struct{}
	mu      sync.Mutex
	closed  bool
	bg      sync.WaitGroup // refills and cleanups
}

// instance is one built sandbox that will run one command.
type instance struct {
	init *initp.Init
	cg   *cgroup.Group
	net  *netpolicy.Stack
}

type spawned struct {
	init   *initp.Init
	err    error
	cg     *cgroup.Group    // its cgroups, made before it (limits)
	procs  []string         // cgroup.procs files it still joins by pid (v2)
	net    *netpolicy.Stack // its network helper, launched alongside
	netErr error
}

// launchNet connects to (or starts) the network helper for the sandbox,
// when it needs one.
func (s *Sandbox) launchNet() (*netpolicy.Stack, error) {
	if s.net == nil {
		return nil, nil
	}
	d, _ := s.storeDir() // where the shared helper listens
	return netpolicy.Launch(*s.net, d)
}

// storeDir is the sandbox's store: WithStore's, or the default one.
func (s *Sandbox) storeDir() (string, error) {
	if s.store != "" {
		return s.store, nil
	}
	return store.DefaultDir()
}

// New checks spec, prepares its base (importing a tarball into the store
// the first time) and returns a Sandbox ready to Run commands.
func New(ctx context.Context, spec sandbox.Spec, opts ...Option) (*Sandbox, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	s := &Sandbox{spec: spec, store: o.store, closing: make(chan struct{})}
	nc, err := netconf.Config(&spec)
	if err != nil {
		return nil, err
	}
	s.net = nc
	if err := s.planSpawn(); err != nil {
		return nil, err
	}
	// Spawn the first instance's init now: it creates the namespaces and
	// writes the id maps while this process prepares the rest of the
	// config. (Spawn returns once the init is executing, so this costs
	// the caller little; a goroutine would often not be scheduled until
	// configure had finished.)
	// The network helper, when one is needed, is reached first: its
	// stack is built while the sandbox is.
	// With limits, its cgroups come first: the init's first stage moves
	// itself into the v1 ones (a pid written to a v1 cgroup.procs waits
	// for an RCU grace period, milliseconds on a busy host).
	pre := spawned{}
	spawnCfg := s.tmpl.SpawnConfig
	if s.cgsys != nil {
		g, err := s.cgsys.New(s.name+"-"+strconv.FormatUint(s.seq.Add(1), 10), s.limits)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", sandbox.ErrLimits, err)
		}
		pre.cg = g
		spawnCfg.CgroupSelf, pre.procs = g.JoinFiles()
	}
	s.pre = make(chan spawned, 1)
	pre.net, pre.netErr = s.launchNet()
	// A first run's init may have been started by the launcher before
	// the Go runtime was (SpawnFirst adopts it if it fits).
	pre.init, pre.err = initp.SpawnFirst(&spawnCfg)
	s.pre <- pre
	if err := s.configure(ctx); err != nil {
		sp := <-s.pre
		if sp.init != nil {
			sp.init.Close()
		}
		if sp.net != nil {
			sp.net.Close()
		}
		if sp.cg != nil {
			sp.cg.Remove()
		}
		return nil, err
	}
	if o.pool > 0 {
		s.pool = make(chan *instance, o.pool)
		for i := 0; i < o.pool; i++ {
			s.refill()
		}
	}
	return s, nil
}

// planSpawn decides the namespaces and id maps: all a spawn needs.
func (s *Sandbox) planSpawn() error {
	sp := &s.spec
	var owner *initp.ID
	if sp.Access != sandbox.AccessNone {
		var st unix.Stat_t
		if err := unix.Stat(sp.Workspace, &st); err != nil {
			return &sandbox.SpecError{Field: "workspace", Err: err}
		}
		owner = &initp.ID{UID: st.Uid, GID: st.Gid}
	}
	ids := planIDs(os.Geteuid(), os.Getegid(), sp.Root, owner)
	s.ids = ids
	ns := uint64(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
	if sp.Network != sandbox.NetworkHost {
		ns |= unix.CLONE_NEWNET
	}
	s.tmpl.SpawnConfig = initp.SpawnConfig{
		Namespaces:    ns,
		UIDMap:        ids.uidMap,
		GIDMap:        ids.gidMap,
		SetgroupsDeny: ids.setgroupsDeny,
		InitID:        ids.initID,
		Trace:         sp.Trace,
		NoMPTCP:       landlockTCP(sp, s.net == nil),
	}
	if s.net != nil {
		a6 := netpolicy.SandboxAddr6.As16()
		s.tmpl.SpawnConfig.TUN = &initp.TUN{
			Name: netpolicy.Device, MTU: netpolicy.MTU,
			Addr4: netpolicy.SandboxAddr.As4(), Prefix4: netpolicy.Prefix4,
			Addr6: &a6, Prefix6: netpolicy.Prefix6,
			DefaultRoutes: s.net.Mode != netpolicy.None,
		}
	}
	s.limits = cgroup.Limits{MemoryBytes: sp.Limits.Memory, Pids: sp.Limits.Pids, CPUs: sp.Limits.CPUs}
	if !s.limits.Zero() {
		sys, err := cgroup.Detect()
		if err == nil {
			err = sys.Supports(s.limits)
		}
		if err != nil {
			return &sandbox.SpecError{Field: "limits", Err: fmt.Errorf("%w: %w", sandbox.ErrLimits, err)}
		}
		s.cgsys = sys
		s.name = instancePrefix()
	}
	return nil
}

// configure builds the rest of the template config shared by every
// instance.
func (s *Sandbox) configure(ctx context.Context) error {
	sp := &s.spec
	scratch := scratchDir()
	plan := rootPlan{tmpSize: sp.Limits.TmpSize, scratch: sp.Scratch, rootDir: scratch,
		resolver: s.net != nil && s.net.Mode != netpolicy.None}
	var app *appRoot
	switch sp.Base.Kind {
	case sandbox.BaseHost:
		plan.baseRoot, plan.hostBase = "/", true
	case sandbox.BaseDir:
		plan.baseRoot = sp.Base.Path // made canonical by Normalize
	case sandbox.BaseTar, sandbox.BaseOCI, sandbox.BaseDebian12:
		if app = s.appCandidate(&plan); app != nil {
			break // mounted, once the mount points are known
		}
		root, err := s.storeBase(ctx)
		if err != nil {
			return err
		}
		plan.baseRoot = root
	}

	switch sp.Access {
	case sandbox.AccessNone:
	case sandbox.AccessChangeset:
		plan.overlays = append(plan.overlays, overlay{lower: sp.Workspace, upper: sp.Changeset.Upper, work: sp.Changeset.Work})
	default:
		plan.binds = append(plan.binds, bind{src: sp.Workspace, dst: sp.Workspace, ro: sp.Access == sandbox.AccessReadOnly})
	}
	for _, c := range sp.Captures {
		plan.overlays = append(plan.overlays, overlay{lower: c.Path, upper: c.Upper, work: c.Work})
	}
	if sp.BaseWrites != "" {
		if plan.hostBase {
			return &sandbox.SpecError{Field: "base", Err: errors.New("the host base cannot be written: build images from a dir, tar, oci or debian-12 base")}
		}
		for _, name := range baseEntries(plan.baseRoot, false) {
			src := filepath.Join(plan.baseRoot, name)
			if fi, err := os.Lstat(src); err != nil || !fi.IsDir() || isOwnMount("/"+name) {
				continue
			}
			d := filepath.Join(sp.BaseWrites, name)
			for _, sub := range []string{d + "/upper", d + "/work"} {
				if err := os.MkdirAll(sub, 0o755); err != nil {
					return &sandbox.SpecError{Field: "base", Err: err}
				}
			}
			plan.overlays = append(plan.overlays, overlay{lower: src, upper: d + "/upper", work: d + "/work", target: "/" + name, base: true})
		}
	}
	for _, o := range plan.overlays {
		if !o.base {
			if err := reuseWork(o.work); err != nil {
				return &sandbox.SpecError{Field: "capture", Err: err}
			}
		}
	}
	if s.ids.idmap {
		// The sandbox's PID 1 runs as an unprivileged host id: it must own
		// the directories overlayfs writes to.
		for _, o := range plan.overlays {
			for _, d := range []string{filepath.Dir(o.upper), o.upper, o.work} {
				if err := os.Lchown(d, hostIDBase, hostIDBase); err != nil {
					return &sandbox.SpecError{Field: "capture", Err: err}
				}
			}
		}
	}
	for _, m := range sp.Mounts {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return &sandbox.SpecError{Field: "mount", Err: err}
		}
		plan.binds = append(plan.binds, bind{src: m.Source, dst: m.Target, ro: m.ReadOnly, file: !fi.IsDir()})
	}
	sortBinds(plan.binds)

	ids := s.ids
	plan.idmap = ids.idmap
	if plan.hostBase {
		plan.hideExe = hostExecutable()
	}
	hide, err := hideStore(s.store, &plan)
	if err != nil {
		if app != nil {
			app.f.Close()
		}
		return err
	}
	plan.hide = hide
	if app != nil {
		if err := s.placeAppBase(ctx, app, &plan); err != nil {
			return err
		}
	}

	caps, err := capMask(sp.Capabilities)
	if err != nil {
		return &sandbox.SpecError{Field: "capabilities", Err: err}
	}
	prog, err := seccomp.Default().Program()
	if err != nil {
		return fmt.Errorf("building the seccomp filter: %w", err)
	}
	user := ids.user
	ops, rules := buildRoot(&plan)
	tmpCheck := "/tmp"
	if sp.Scratch != "" {
		tmpCheck = "" // the owner of the scratch directory watches its filesystem
	}
	s.tmpl = initp.Config{
		SpawnConfig:  s.tmpl.SpawnConfig,
		IDMapUID:     ids.idmapUID,
		IDMapGID:     ids.idmapGID,
		Ops:          ops,
		Hostname:     sp.Hostname,
		Scratch:      scratch,
		LoopbackUp:   sp.Network != sandbox.NetworkHost,
		Seccomp:      seccomp.Encode(prog),
		Caps:         caps,
		CapLast:      capLast(),
		Rlimits:      []initp.Rlimit{{Resource: unix.RLIMIT_CORE}},
		User:         &user,
		RootReadOnly: true,
		TmpCheck:     tmpCheck,
		NoNewPrivs:   true,
		Landlock:     landlockConfig(sp, s.net == nil, rules),
	}

	return nil
}

func (s *Sandbox) storeBase(ctx context.Context) (string, error) {
	st, err := s.openStore()
	if err != nil {
		return "", err
	}
	shift := store.Shift()
	var b store.Base
	switch s.spec.Base.Kind {
	case sandbox.BaseTar:
		b, err = st.TarBase(ctx, s.spec.Base.Path, store.ImportOptions{UIDShift: shift})
	case sandbox.BaseOCI:
		if s.spec.Base.Path == "" {
			b, err = st.PullBase(ctx, s.spec.Base.Ref, store.ImportOptions{UIDShift: shift}, false)
		} else {
			b, err = st.OCIBase(ctx, s.spec.Base.Path, s.spec.Base.Ref, store.ImportOptions{UIDShift: shift})
		}
	case sandbox.BaseDebian12:
		b, err = st.CuratedBase(string(s.spec.Base.Kind))
	}
	if err != nil {
		return "", &sandbox.SpecError{Field: "base", Err: err}
	}
	s.releaseBase = store.UseBase(b.Root)
	return b.Root, nil
}

// placeAppBase mounts the app's root image when the plan's mount points
// allow it, and unpacks the app into the store otherwise.
func (s *Sandbox) placeAppBase(ctx context.Context, app *appRoot, plan *rootPlan) error {
	if !app.fits(plan) {
		app.f.Close()
		root, err := s.storeBase(ctx)
		if err != nil {
			return err
		}
		plan.baseRoot = root
		return nil
	}
	st, err := s.openStore()
	if err != nil {
		app.f.Close()
		return err
	}
	m, err := app.check(st)
	if err != nil {
		return err
	}
	plan.app = m
	return nil
}

func (s *Sandbox) openStore() (*store.Store, error) {
	dir, err := s.storeDir()
	if err != nil {
		return nil, &sandbox.SpecError{Field: "store", Err: err}
	}
	st, err := store.Open(dir)
	if err != nil {
		return nil, &sandbox.SpecError{Field: "store", Err: err}
	}
	return st, nil
}

// hideStore returns where pinfold's store shows inside, when a bind or
// changeset shows a directory that holds it (a run in the home directory):
// the sandbox sees it empty. A command that could write the store could
// change the bases, images, changesets and launch records of later runs.
// The store is created first if need be, so that there is a directory to
// hide rather than a place to create one.
func hideStore(dir string, plan *rootPlan) ([]string, error) {
	if dir == "" {
		d, err := store.DefaultDir()
		if err != nil {
			return nil, nil // no store to protect
		}
		dir = d
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	type shown struct{ src, dst string }
	var shows []shown
	for _, b := range plan.binds {
		if !b.file {
			shows = append(shows, shown{b.src, b.dst})
		}
	}
	for _, o := range plan.overlays {
		if !o.base {
			dst := o.target
			if dst == "" {
				dst = o.lower
			}
			shows = append(shows, shown{o.lower, dst})
		}
	}
	var hide []string
	for _, s := range shows {
		if !under(dir, s.src) || dir == s.src {
			continue
		}
		if len(hide) == 0 {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, &sandbox.SpecError{Field: "store", Err: err}
			}
		}
		hide = append(hide, filepath.Join(s.dst, strings.TrimPrefix(dir, s.src)))
	}
	return hide, nil
}

// hostExecutable is the running binary when it lies in a directory the
// host base shows; the sandbox masks it.
func hostExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	for _, d := range hostSystemDirs {
		if under(exe, "/"+d) {
			return exe
		}
	}
	return ""
}

// scratchDir is a host directory the init may mount its staging tmpfs on
// (inside its own mount namespace; the host never sees it).
func scratchDir() string {
	for _, d := range [...]string{"/tmp", "/mnt", "/dev"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return "/proc"
}

var capLastOnce struct {
	sync.Once
	n uint32
}

func capLast() uint32 {
	capLastOnce.Do(func() {
		capLastOnce.n = uint32(len(capNames) - 1)
		// Plain system calls: os.ReadFile's registration with the
		// runtime's poller is four more on a first run's way to its
		// command (10-20 µs here).
		var b [16]byte
		k, err := initp.ReadFileRaw("/proc/sys/kernel/cap_last_cap", b[:])
		if err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b[:k]))); err == nil && n < 64 {
				capLastOnce.n = uint32(n)
			}
		}
	})
	return capLastOnce.n
}

// instancePrefix names this process's sandbox instances "<pid>-<start
// time>": unique on the host, and recognisably stale once the process is
// gone (see Clean).
func instancePrefix() string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + "-" + strconv.FormatUint(processStart(pid), 10)
}

// processStart returns a process's start time, or 0.
func processStart(pid int) uint64 { return procstat.StartTime(pid) }

// newInstance builds one sandbox.
func (s *Sandbox) newInstance() (*instance, error) {
	cfg := s.tmpl
	inst := &instance{}
	var in *initp.Init
	var st *netpolicy.Stack
	var err, netErr error
	if s.preUsed.CompareAndSwap(false, true) {
		sp := <-s.pre
		in, err, st, netErr = sp.init, sp.err, sp.net, sp.netErr
		inst.cg, cfg.Cgroups = sp.cg, sp.procs
	} else {
		if s.cgsys != nil {
			name := s.name + "-" + strconv.FormatUint(s.seq.Add(1), 10)
			g, err := s.cgsys.New(name, s.limits)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", sandbox.ErrLimits, err)
			}
			inst.cg = g
			// The first stage moves itself into the v1 groups before
			// it makes the sandbox's PID 1 (see New); v2's are joined
			// by pid.
			cfg.CgroupSelf, cfg.Cgroups = g.JoinFiles()
		}
		st, netErr = s.launchNet()
		in, err = initp.Spawn(&cfg.SpawnConfig)
	}
	if err == nil {
		err = in.Configure(&cfg)
		if errors.Is(err, initp.ErrConfigHint) {
			// The launcher's init has another config, a stale hint's:
			// one of our own.
			in.Discard()
			if in, err = initp.Spawn(&cfg.SpawnConfig); err == nil {
				err = in.Configure(&cfg)
			} else {
				in = nil
			}
		}
		if err != nil && in != nil {
			in.Close()
		}
	}
	if err == nil && netErr != nil {
		in.Close()
		err = netErr
	}
	var tun *os.File
	if err == nil && st != nil {
		// The device comes before the root is ready (M_TUN before
		// M_READY): the helper serves it while the init builds the root.
		if tun, err = in.TUN(); err != nil {
			in.Close()
		}
	}
	if err != nil {
		if st != nil {
			st.Close()
		}
		if inst.cg != nil {
			inst.cg.Remove()
		}
		return nil, explainSetup(err)
	}
	inst.init = in
	if st != nil {
		if err := st.Attach(tun); err != nil {
			s.discard(inst)
			return nil, explainSetup(err)
		}
		inst.net = st
	}
	return inst, nil
}

// startNet makes sure the instance's network helper serves it before the
// command starts, where that matters: published ports must listen when
// Run returns. Otherwise the kernel queues the command's first packets
// until the helper reads them, and a helper that fails leaves the
// sandbox without a network (Wait reports it).
func (inst *instance) startNet(ctx context.Context, c *netpolicy.Config) error {
	if len(c.Publish) == 0 {
		return nil
	}
	return inst.net.Ready(ctx)
}

// discard tears an instance down in the background.
func (s *Sandbox) discard(inst *instance) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if inst.net != nil {
			inst.net.Close()
		}
		if inst.init != nil {
			inst.init.Close()
		}
		if inst.cg != nil {
			inst.cg.Remove()
		}
	}()
}

func (s *Sandbox) refill() {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		inst, err := s.newInstance()
		if err == nil {
			if err = inst.init.Ready(); err != nil {
				s.discard(inst)
			}
		}
		if err != nil {
			return // Run builds one itself and reports the error
		}
		select {
		case s.pool <- inst:
		case <-s.closing:
			s.discard(inst)
		}
	}()
}

func (s *Sandbox) take() (*instance, error) {
	if s.pool != nil {
		select {
		case inst := <-s.pool:
			s.refill()
			return inst, nil
		default:
		}
	}
	return s.newInstance()
}

// Run starts cmd in a fresh instance of the sandbox.
func (s *Sandbox) Run(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	p, err := s.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Start is Run returning the native process, whose PTY other runtimes do
// not have.
func (s *Sandbox) Start(ctx context.Context, cmd *sandbox.Cmd) (*Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("no command given")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &Process{sb: s, timeout: cmd.Timeout, done: make(chan struct{})}
	io, err := p.openStdio(cmd)
	if err != nil {
		return nil, err
	}
	inst, err := s.take()
	if err != nil {
		io.abort()
		return nil, err
	}
	if s.net != nil {
		if err := inst.startNet(ctx, s.net); err != nil {
			io.abort()
			s.discard(inst)
			return nil, explainSetup(err)
		}
	}
	env := cmd.Env
	if env == nil {
		env = sandbox.DefaultEnv(&s.spec, cmd.TTY)
	}
	dir := cmd.Dir
	if dir == "" {
		dir = "/"
		if s.spec.Access != sandbox.AccessNone {
			dir = s.spec.Workspace
		}
	}
	x := &initp.Exec{Args: cmd.Args, Env: env, Dir: dir, Setsid: true}
	if cmd.TTY {
		rows, cols := cmd.Rows, cmd.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		x.TTY = &initp.Winsize{Rows: rows, Cols: cols}
	} else if io.files[0] != nil {
		x.Stdio = []int{int(io.files[0].Fd()), int(io.files[1].Fd()), int(io.files[2].Fd())}
	}
	p.start = time.Now()
	var pty *os.File
	err = inst.init.SendExec(x)
	if err == nil {
		if inst.init.Adopted() != 0 {
			// The CLI's run, which records its launch once the command
			// runs: what the record reads of the host is read while the
			// init starts the command, not after.
			p.prepareRecord()
		}
		pty, err = inst.init.AwaitStarted()
	}
	io.started()
	if err != nil {
		io.abort()
		s.discard(inst)
		return nil, explainExec(err, cmd.Args[0])
	}
	p.inst, p.io, p.PTY = inst, io, pty
	if pty != nil && (cmd.Stdin != nil || cmd.Stdout != nil) {
		io.copyTTY(pty, cmd.Stdin, cmd.Stdout)
	}
	if cmd.Timeout > 0 {
		p.timer = time.AfterFunc(cmd.Timeout, func() {
			p.timedOut.Store(true)
			inst.init.Kill()
		})
	}
	if ctx.Done() != nil {
		go func() {
			select {
			case <-ctx.Done():
				inst.init.Kill()
			case <-p.done:
			}
		}()
	}
	return p, nil
}

// Close stops building instances, discards the pooled ones and waits for
// every background cleanup. Processes already running are not affected.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	if s.preUsed.CompareAndSwap(false, true) {
		sp := <-s.pre
		if sp.init != nil || sp.cg != nil {
			s.discard(&instance{init: sp.init, cg: sp.cg})
		}
		if sp.net != nil {
			sp.net.Close()
		}
	}
	if s.pool != nil {
	drain:
		for {
			select {
			case inst := <-s.pool:
				s.discard(inst)
			default:
				break drain
			}
		}
	}
	s.bg.Wait()
	if s.releaseBase != nil {
		defer s.releaseBase()
	}
	if s.pool != nil {
		for {
			select {
			case inst := <-s.pool:
				inst.init.Close()
				if inst.cg != nil {
					inst.cg.Remove()
				}
			default:
				return nil
			}
		}
	}
	return nil
}

// Run is New, Sandbox.Run and Process.Wait in one call.
func Run(ctx context.Context, spec sandbox.Spec, cmd *sandbox.Cmd, opts ...Option) (*sandbox.Result, error) {
	s, err := New(ctx, spec, opts...)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	p, err := s.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// Process is a command running in a native sandbox.
type Process struct {
	// PTY is the command's terminal when Cmd.TTY was set. When Cmd.Stdin
	// or Cmd.Stdout was given too, the process copies them to and from it.
	PTY *os.File

	sb       *Sandbox
	inst     *instance
	io       *stdio
	start    time.Time
	timeout  time.Duration
	timer    *time.Timer
	timedOut atomic.Bool
	// prepared is what record reads of the host, read early (prepareRecord).
	prepared *launchDeps
	done     chan struct{}
	waitOnce sync.Once
	result   *sandbox.Result
	err      error
}

// Pid returns the host pid of the sandbox's init (PID 1 inside).
func (p *Process) Pid() int { return p.inst.init.Pid() }

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return errors.New("unsupported signal type")
	}
	return p.inst.init.Signal(s)
}

var _ sandbox.Handoffer = (*Process)(nil)

// Handoff replaces the calling process with a minimal waiter for the
// command (see sandbox.Handoffer), having recorded its launch when o asks.
//
// The goroutine must have been locked to its thread (runtime.LockOSThread)
// since before New, so that the sandbox was started by this thread. It
// is not available for sandboxes with a terminal, nor with a network
// stack whose helper is not shared. A sandbox with limits hands its
// cgroups, made and joined before the command started, to the waiter,
// which reports the limits hit and removes them: o must then give the
// messages of its memory and pids limits.
func (p *Process) Handoff(o sandbox.HandoffOptions) error {
	if o.Record != nil {
		p.record(&o)
	}
	if p.PTY != nil || p.io.copies > 0 {
		return errors.New("handoff needs a sandbox without terminal or copied streams")
	}
	var limits *initp.WaitLimits
	if g := p.inst.cg; g != nil {
		mem, pids := g.EventFiles()
		if mem != "" && (o.MemoryMsg == "" || o.OOMMsg == "") || pids != "" && o.PidsMsg == "" {
			return errors.New("handoff of a sandbox with limits needs their messages")
		}
		limits = &initp.WaitLimits{MemoryEvents: mem, OOMMsg: o.OOMMsg, MemoryMsg: o.MemoryMsg,
			PidsEvents: pids, PidsMsg: o.PidsMsg, Dirs: g.Dirs()}
	}
	if o.LimitsHitFile != "" {
		if limits == nil {
			limits = &initp.WaitLimits{}
		}
		limits.HitFile = o.LimitsHitFile
	}
	netFD := -1
	if p.inst.net != nil {
		if o.Report == nil {
			return errors.New("handoff of a network stack needs a stderr to report on")
		}
		var err error
		if netFD, err = p.inst.net.Handoff(o.Report, o.ViolationLog); err != nil {
			return err
		}
	}
	var deadline int64
	if p.timeout > 0 {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		deadline = ts.Nano() + int64(p.timeout-time.Since(p.start))
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	return p.inst.init.Handoff(deadline, o.TimeoutMsg, o.TmpFullMsg, netFD, limits, o.Finish...)
}

// Kill ends the sandbox at once, with everything in it.
func (p *Process) Kill() error { return p.inst.init.Kill() }

// Resize changes the size of the command's terminal.
func (p *Process) Resize(rows, cols uint16) error {
	if p.PTY == nil {
		return errors.New("the command has no terminal")
	}
	return unix.IoctlSetWinsize(int(p.PTY.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}

// Wait waits for the command to end and reports how. By then nothing the
// command started is running.
func (p *Process) Wait() (*sandbox.Result, error) {
	p.waitOnce.Do(func() { p.result, p.err = p.wait() })
	return p.result, p.err
}

func (p *Process) wait() (*sandbox.Result, error) {
	st, err := p.inst.init.Wait()
	dur := time.Since(p.start)
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	ioErr := p.io.wait()
	var violations []sandbox.Violation
	if p.inst.net != nil {
		// Close first: the helper's last reports may still be in flight.
		p.inst.net.Close()
		violations = netconf.Violations(p.inst.net.Violations())
		if err := p.inst.net.Err(); err != nil {
			violations = append(violations, sandbox.Violation{Kind: "network", Reason: "the sandbox had no network: " + err.Error()})
		}
	}
	var stats cgroup.Stats
	if p.inst.cg != nil {
		stats, _ = p.inst.cg.Stats()
		// The group can only go once the init is gone.
		p.inst.init.Close()
		p.inst.cg.Remove()
	} else {
		// Everything in the sandbox is dead by now; the init is only
		// tearing down its namespaces. Nobody needs to wait for that.
		go p.inst.init.Close()
	}
	if err != nil {
		return nil, err
	}
	r := &sandbox.Result{Duration: dur, Limits: p.sb.spec.Limits, Timeout: p.timeout, Violations: violations}
	if p.sb.spec.Trace {
		if t := p.inst.init.Adopted(); t != 0 {
			r.Trace = append(r.Trace, sandbox.TracePoint{Step: "pinfold: init adopted from the launcher", Mono: t})
		}
		if t := p.inst.init.Hinted(); t != 0 {
			r.Trace = append(r.Trace, sandbox.TracePoint{Step: "pinfold: config from the launcher's hint", Mono: t})
		}
		p.writeSpawnHint()
		p.writeTraceConfigHint()
	}
	for _, m := range st.Marks {
		r.Trace = append(r.Trace, sandbox.TracePoint{Step: m.Step, Mono: m.Mono})
	}
	switch {
	case p.timedOut.Load():
		r.ExitCode, r.Reason, r.Signal = sandbox.ExitCodeTimeout, sandbox.ReasonTimeout, syscall.SIGKILL
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTimeout)
	case st.Killed:
		r.ExitCode, r.Reason, r.Signal = 128+int(syscall.SIGKILL), sandbox.ReasonKilled, syscall.SIGKILL
	case st.Wait.Signaled():
		r.Signal = st.Wait.Signal()
		r.ExitCode, r.Reason = 128+int(r.Signal), sandbox.ReasonSignaled
	default:
		r.ExitCode, r.Reason = st.Wait.ExitStatus(), sandbox.ReasonExited
	}
	if stats.OOMKills > 0 {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitMemory)
		if r.Reason != sandbox.ReasonExited && r.Reason != sandbox.ReasonTimeout {
			r.Reason = sandbox.ReasonOOM
		}
	}
	if stats.PidsMaxHits > 0 {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitPids)
	}
	if st.TmpFull {
		r.LimitsHit = append(r.LimitsHit, sandbox.LimitTmp)
	}
	return r, ioErr
}

// ErrIDMap is wrapped by errors about a workspace that cannot be shown
// with its owner's ids (its filesystem has no idmapped mounts).
var ErrIDMap = errors.New("idmapped mounts unsupported")

// explainSetup turns setup failures the user can fix into clearer errors.
func explainSetup(err error) error {
	var se *initp.SetupError
	if !errors.As(err, &se) {
		return err
	}
	if se.Step == 31 && (se.Errno == unix.EACCES || se.Errno == unix.EPERM || se.Errno == unix.ENOENT) {
		return fmt.Errorf("%w: the network modes outbound and allow need /dev/net/tun: "+
			"make it readable and writable by everyone (mode 0666, Debian's default; modprobe tun if it is missing), or run pinfold as root", err)
	}
	if se.Step == 9 && se.Errno == unix.EINVAL { // idmapping a mount
		return fmt.Errorf("%w: %w: the filesystem of %s does not support idmapped mounts; "+
			"run pinfold as the owner of the directory instead of root", ErrIDMap, err, se.Detail)
	}
	if se.Step == initp.StepFuse || se.Op != nil && (se.Op.Kind == initp.OpFuse || strings.HasPrefix(se.Op.A, appStage+"/")) {
		if se.Errno == unix.ESTALE {
			return fmt.Errorf("%w: %w: the app file changed after pinfold checked it", ErrAppMount, err)
		}
		return fmt.Errorf("%w: %w", ErrAppMount, err)
	}
	if se.Step == initp.StepLandlock {
		return fmt.Errorf("setting up the sandbox: %w (the kernel refused the Landlock layer; "+
			"PINFOLD_LANDLOCK=0 runs without it, with the namespace layer alone)", err)
	}
	return fmt.Errorf("setting up the sandbox: %w", err)
}

// explainExec reports a command the sandbox could not execute.
func explainExec(err error, name string) error {
	var se *initp.SetupError
	if errors.As(err, &se) && se.Step == initp.StepExec {
		return &sandbox.ExecError{Name: name, Err: se.Errno}
	}
	if errors.As(err, &se) && se.Step == 21 { // chdir
		return &sandbox.SpecError{Field: "workdir", Err: fmt.Errorf("changing to directory %s in the sandbox: %w", se.Detail, se.Errno)}
	}
	return explainSetup(err)
}

// options are the runtime's options, applied.
func (r *Runtime) options() options {
	var o options
	for _, f := range r.opts {
		f(&o)
	}
	return o
}
