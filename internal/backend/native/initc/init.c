/*
 * pinfold's sandbox init.
 *
 * The supervisor executes this program from a sealed memfd with one
 * SOCK_SEQPACKET socket as fd 0. It runs in two stages:
 *
 *   stage 1 (host namespaces): reads M_CONFIG, clones stage 2 into new
 *   namespaces (sharing this small address space and fd table, and with the
 *   supervisor as its parent), writes its uid/gid maps, puts it into its
 *   cgroups, prepares idmapped mounts, reports its pid, releases it, exits.
 *
 *   stage 2 (PID 1 of the sandbox): builds the root from the operations in
 *   the config, reads M_EXEC, starts the command in a vfork child that drops
 *   privileges and installs the seccomp filter right before execve, then
 *   reaps children and forwards signals from the supervisor. When the
 *   command exits it kills everything else in the sandbox, reports the
 *   status, and exits.
 *
 * Run as "pinfold-wait" it is instead the waiter (see waiter_main): what a
 * pinfold process replaces itself with once its command runs.
 *
 * No C library: every call is a raw system call (see sys_amd64.h). Errors
 * are reported to the supervisor as M_ERROR and never printed.
 */
#include "proto.h"
#include "mini.h"

/* The kernel enters at _start with the stack holding argc, argv, envp. */
void pf_main(long *sp);
__asm__(".text\n"
	".globl _start\n"
	".type _start,@function\n"
	"_start:\n"
	"	xor %ebp, %ebp\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call pf_main\n"
	"	hlt\n");

#define CLOSE_RANGE_CLOEXEC 4
#define AF_UNIX 1
#ifndef SOCK_SEQPACKET
#define SOCK_SEQPACKET 5
#endif
#define EPERM 1
#define ESTALE 116

struct mount_attr {
	u64 attr_set, attr_clr, propagation, userns_fd;
};
struct sock_fprog {
	u16 len;
	void *filter;
};
struct rlimit64 {
	u64 cur, max;
};
struct kernel_sigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	u64 mask;
};
struct siginfo {
	i32 signo, errcode, code, pad;
	i32 pid, uid, status;
	char rest[100];
};
struct winsize {
	u16 rows, cols, x, y;
};
struct ifreq {
	char name[16];
	union {
		short flags;
		int ivalue;
		struct {
			u16 family, port;
			u8 addr[4];
			u8 zero[8];
		} sin;
		char pad[24];
	} u;
};
struct sockaddr_in4 {
	u16 family, port;
	u8 addr[4];
	u8 zero[8];
};
struct rtentry {
	unsigned long pad1;
	struct sockaddr_in4 dst, gateway, genmask;
	unsigned short flags;
	short pad2;
	unsigned long pad3;
	void *pad4;
	short metric;
	const char *dev;
	unsigned long mtu, window;
	unsigned short irtt;
};
struct in6_rtmsg {
	u8 dst[16], src[16], gateway[16];
	u32 type;
	u16 dst_len, src_len;
	u32 metric;
	unsigned long info;
	u32 flags;
	i32 ifindex;
};

/* ---- configuration ---------------------------------------------------- */

#define MAXOPS 512
#define MAXLIST 64
#define MAXLLRULES 256

struct opref {
	const struct op *op;
	const char *a, *b, *c, *d;
	u32 alen;
	int fd;   /* OP_IDMAP: the detached mount stage 1 made; OP_FUSE: the image file */
	int fuse; /* OP_FUSE: /dev/fuse, opened as the sandbox's user namespace */
};

static struct {
	u64 nsflags;
	const char *uidmap, *gidmap, *setgroups, *hostname, *scratch, *tmpcheck;
	const char *idmap_uid, *idmap_gid;
	const char *cgroups[MAXLIST];
	int ncgroups;
	const char *cgself[MAXLIST];
	int ncgself;
	struct opref ops[MAXOPS];
	int nops, nidmap, nfuse;
	int loup, rootro, nnp, has_user, has_initid;
	const struct tunconf *tun;
	const void *seccomp;
	u32 seccomp_len;
	u64 ll_fs, ll_net; /* C_LANDLOCK: handled access; 0 without Landlock */
	const char *llrules[MAXLLRULES];
	int nllrules, llfd, nomptcp;
	u64 caps;
	u32 caplast;
	u32 uid, gid, init_uid, init_gid;
	const u32 *groups;
	u32 ngroups;
	const u8 *rlimits[MAXLIST];
	int nrlimits;
	u32 umask;
	int trace, ntrace;
	u64 marks[64][2];
	volatile int go; /* stage 1 -> stage 2: 1 proceed, -1 give up */
} G;

/* tmark records when a step happened, for benchmarks (C_TRACE). */
static void tmark(u64 id)
{
	long ts[2];
	if (!G.trace)
		return;
	if (G.ntrace < 64 && sys2(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, ts) == 0) {
		G.marks[G.ntrace][0] = id;
		G.marks[G.ntrace][1] = (u64)ts[0] * 1000000000ULL + (u64)ts[1];
		G.ntrace++;
	}
}

/* Message buffers live in bss: only the pages a message touches fault in. */
static char spawnbuf[8192];
static char cfgbuf[256 * 1024];
static char execbuf[256 * 1024];

static const int SOCK = 0;

static long sendmsg_fds(const void *buf, size_t len, const int *fds, int nfds)
{
	return send_fds(SOCK, buf, len, fds, nfds);
}

static void send_simple(u32 type, const void *payload, u32 n)
{
	char b[64];
	u32 h[2] = {type, n};
	memcpy(b, h, 8);
	memcpy(b + 8, payload, n);
	sendmsg_fds(b, 8 + n, 0, 0);
}

static void report(u32 step, long err, int opidx, const char *detail)
{
	char b[4096 + 32];
	u32 h[2];
	i32 body[3] = {(i32)step, (i32)(err < 0 ? -err : err), opidx};
	size_t dl = detail ? slen(detail) : 0;
	if (dl > 4095)
		dl = 4095;
	h[0] = M_ERROR;
	h[1] = (u32)(12 + dl + 1);
	memcpy(b, h, 8);
	memcpy(b + 8, body, 12);
	memcpy(b + 20, detail ? detail : "", dl);
	b[20 + dl] = 0;
	sendmsg_fds(b, 20 + dl + 1, 0, 0);
}

static long recv_msg(char *buf, size_t cap, int *fds, int maxfds, int *nfds)
{
	return recv_fds(SOCK, buf, cap, fds, maxfds, nfds);
}

/* Records: u16 tag, u16 pad, u32 len, data padded to 4. */
struct rec {
	u16 tag;
	u32 len;
	const char *data;
};

static int next_rec(const char **p, const char *end, struct rec *r)
{
	u16 tag;
	u32 len;
	if (end - *p < 8)
		return 0;
	memcpy(&tag, *p, 2);
	memcpy(&len, *p + 4, 4);
	if ((u64)len > (u64)(end - *p - 8))
		return -1;
	r->tag = tag;
	r->len = len;
	r->data = *p + 8;
	*p += 8 + ((len + 3) & ~3u);
	if (*p > end)
		*p = end;
	return 1;
}

static u32 rd32(const char *p)
{
	u32 v;
	memcpy(&v, p, 4);
	return v;
}
static u64 rd64(const char *p)
{
	u64 v;
	memcpy(&v, p, 8);
	return v;
}

/* opstr reads one length-prefixed string of an op; returns NULL for len 0. */
static const char *opstr(const char **p, const char *end, u32 *lenp)
{
	u32 n;
	const char *s;
	if (end - *p < 4)
		return 0;
	n = rd32(*p);
	*p += 4;
	if ((u64)n > (u64)(end - *p))
		return 0;
	s = *p;
	*p += n;
	if (lenp)
		*lenp = n;
	return n ? s : 0;
}

static int parse_spawn(const char *buf, long n)
{
	const char *p = buf + 8, *end = buf + n;
	struct rec r;
	int k;
	while ((k = next_rec(&p, end, &r)) > 0) {
		switch (r.tag) {
		case C_NSFLAGS:
			G.nsflags = rd64(r.data);
			break;
		case C_UIDMAP:
			G.uidmap = r.data;
			break;
		case C_GIDMAP:
			G.gidmap = r.data;
			break;
		case C_SETGROUPS:
			G.setgroups = r.data;
			break;
		case C_INITID:
			G.has_initid = 1;
			G.init_uid = rd32(r.data);
			G.init_gid = rd32(r.data + 4);
			break;
		case C_NOMPTCP:
			G.nomptcp = 1;
			break;
		case C_TRACE:
			G.trace = 1;
			break;
		case C_CGSELF:
			if (G.ncgself == MAXLIST || !r.len || r.data[r.len - 1])
				return -1;
			G.cgself[G.ncgself++] = r.data;
			break;
		case C_TUN:
			if (r.len < sizeof(struct tunconf))
				return -1;
			G.tun = (const struct tunconf *)r.data;
			break;
		}
	}
	return k < 0 ? -1 : 0;
}

static int parse_config(const char *buf, long n)
{
	const char *p = buf + 8, *end = buf + n;
	struct rec r;
	int k;
	G.caplast = 40;
	while ((k = next_rec(&p, end, &r)) > 0) {
		switch (r.tag) {
		case C_CGROUP:
			if (G.ncgroups == MAXLIST)
				return -1;
			G.cgroups[G.ncgroups++] = r.data;
			break;
		case C_IDMAP:
			G.idmap_uid = r.data;
			G.idmap_gid = r.data + slen(r.data) + 1;
			break;
		case C_OP: {
			const char *q = r.data + sizeof(struct op), *qe = r.data + r.len;
			struct opref *o;
			if (G.nops == MAXOPS || r.len < sizeof(struct op))
				return -1;
			o = &G.ops[G.nops++];
			o->op = (const struct op *)r.data;
			o->a = opstr(&q, qe, &o->alen);
			o->b = opstr(&q, qe, 0);
			o->c = opstr(&q, qe, 0);
			o->d = opstr(&q, qe, 0);
			o->fd = -1;
			o->fuse = -1;
			if (o->op->kind == OP_IDMAP)
				G.nidmap++;
			if (o->op->kind == OP_FUSE)
				G.nfuse++;
			break;
		}
		case C_HOSTNAME:
			G.hostname = r.data;
			break;
		case C_SCRATCH:
			G.scratch = r.data;
			break;
		case C_LOUP:
			G.loup = 1;
			break;
		case C_SECCOMP:
			G.seccomp = r.data;
			G.seccomp_len = r.len;
			break;
		case C_CAPS:
			G.caps = rd64(r.data);
			break;
		case C_RLIMIT:
			if (G.nrlimits == MAXLIST)
				return -1;
			G.rlimits[G.nrlimits++] = (const u8 *)r.data;
			break;
		case C_USER:
			G.has_user = 1;
			G.uid = rd32(r.data);
			G.gid = rd32(r.data + 4);
			break;
		case C_GROUPS:
			G.groups = (const u32 *)r.data;
			G.ngroups = r.len / 4;
			break;
		case C_ROOTRO:
			G.rootro = 1;
			break;
		case C_TMPCHECK:
			G.tmpcheck = r.data;
			break;
		case C_CAPLAST:
			G.caplast = rd32(r.data);
			break;
		case C_NNP:
			G.nnp = 1;
			break;
		case C_LANDLOCK:
			if (r.len < 16)
				return -1;
			G.ll_fs = rd64(r.data);
			G.ll_net = rd64(r.data + 8);
			break;
		case C_LLRULE:
			if (G.nllrules == MAXLLRULES || r.len < 9)
				return -1;
			G.llrules[G.nllrules++] = r.data;
			break;

		}
	}
	return k < 0 || !G.scratch ? -1 : 0;
}

/* ---- stage 1 ---------------------------------------------------------- */

static long write_file(const char *path, const char *data, size_t n)
{
	long fd = sys4(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0), r;
	if (fd < 0)
		return fd;
	r = sys3(__NR_write, fd, data, n);
	sys1(__NR_close, fd);
	return r < 0 ? r : 0;
}

static void procpath(char *b, long pid, const char *leaf)
{
	b[0] = 0;
	scat(b, 64, "/proc/");
	utoa(b + 6, (unsigned long)pid);
	scat(b, 64, "/");
	scat(b, 64, leaf);
}

static long write_maps(long pid, const char *uidmap, const char *gidmap, const char *setgroups)
{
	char path[64];
	long r;
	if (setgroups) {
		procpath(path, pid, "setgroups");
		if ((r = write_file(path, setgroups, slen(setgroups))) < 0) {
			report(ST_SETGROUPS, r, -1, path);
			return r;
		}
	}
	procpath(path, pid, "uid_map");
	if ((r = write_file(path, uidmap, slen(uidmap))) < 0) {
		report(ST_UIDMAP, r, -1, uidmap);
		return r;
	}
	procpath(path, pid, "gid_map");
	if ((r = write_file(path, gidmap, slen(gidmap))) < 0) {
		report(ST_GIDMAP, r, -1, gidmap);
		return r;
	}
	return 0;
}

static volatile int helper_word;
static char helper_stack[16384];

static int helper_main(void *arg)
{
	(void)arg;
	for (;;)
		sys4(__NR_futex, &helper_word, FUTEX_WAIT, 0, 0);
	return 0;
}

/*
 * idmap_userns returns an fd of a user namespace whose maps are the given
 * ones, for idmapped mounts that must map differently from the sandbox.
 */
static long idmap_userns(void)
{
	char path[64];
	long pid, fd, r;
	pid = pf_clone(CLONE_NEWUSER | CLONE_VM | SIGCHLD, helper_stack + sizeof helper_stack,
		       helper_main, 0);
	if (pid < 0)
		return pid;
	r = write_maps(pid, G.idmap_uid, G.idmap_gid, 0);
	procpath(path, pid, "ns/user");
	fd = r < 0 ? r : sys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	sys2(__NR_kill, pid, SIGKILL);
	sys4(__NR_wait4, pid, 0, WALL, 0);
	return fd;
}

/*
 * prepare_idmaps clones the sources of OP_IDMAP ops as the host sees them
 * (stage 2 may not be able to traverse their parents) and idmaps those that
 * need it, for stage 2 to attach.
 */
static long prepare_idmaps(long pid)
{
	char path[64];
	long ns = -1, r = 0;
	for (int i = 0; i < G.nops && r == 0; i++) {
		struct opref *o = &G.ops[i];
		struct mount_attr a;
		long fd;
		if (o->op->kind != OP_IDMAP)
			continue;
		if (ns < 0 && !(o->op->flags & OPF_NOIDMAP)) {
			if (G.idmap_uid)
				ns = idmap_userns();
			else {
				procpath(path, pid, "ns/user");
				ns = sys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
			}
			if (ns < 0) {
				report(ST_IDMAP_USERNS, ns, -1, 0);
				return ns;
			}
		}
		fd = sys3(__NR_open_tree, AT_FDCWD, o->a, OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
		if (fd < 0) {
			if ((o->op->flags & OPF_OPTIONAL) && fd == -ENOENT)
				continue;
			report(ST_OPEN_TREE, fd, i, o->a);
			r = fd;
			break;
		}
		memset(&a, 0, sizeof a);
		a.attr_set = o->op->attr;
		if (!(o->op->flags & OPF_NOIDMAP)) {
			a.attr_set |= MOUNT_ATTR_IDMAP;
			a.userns_fd = (u64)ns;
		}
		if (a.attr_set) {
			r = sys5(__NR_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a);
			if (r < 0) {
				report(ST_MOUNT_SETATTR, r, i, o->a);
				sys1(__NR_close, fd);
				break;
			}
		}
		o->fd = (int)fd;
	}
	if (ns >= 0)
		sys1(__NR_close, ns);
	return r;
}

/* parse_u64s reads n decimal numbers separated by single spaces. */
static int parse_u64s(const char *s, u64 *v, int n)
{
	for (int i = 0; i < n; i++) {
		u64 x = 0;
		if (*s < '0' || *s > '9')
			return -1;
		while (*s >= '0' && *s <= '9')
			x = x * 10 + (u64)(*s++ - '0');
		v[i] = x;
		if (i < n - 1 && *s++ != ' ')
			return -1;
	}
	return *s ? -1 : 0;
}

static long fuse_ns;
static int fuse_sock[2];

/*
 * fuse_open_main runs in a forked copy of stage 1 (its own memory and fd
 * table, as setns into a user namespace requires): it joins the sandbox's
 * user namespace keeping the host's ids, opens /dev/fuse (which the
 * sandbox's own ids may not open) and sends the fd back. FUSE takes a
 * mount only from the user namespace that opened the device: the sandbox's,
 * so that the ids the daemon reports are the sandbox's own.
 */
static int fuse_open_main(void *arg)
{
	long fd;
	int f;
	(void)arg;
	if (sys2(__NR_setns, fuse_ns, CLONE_NEWUSER) < 0)
		return 1;
	fd = sys4(__NR_openat, AT_FDCWD, "/dev/fuse", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0)
		return 2;
	f = (int)fd;
	return send_fds(fuse_sock[1], "f", 1, &f, 1) < 0 ? 3 : 0;
}

/*
 * prepare_fuse opens the image file of each OP_FUSE op, checks its identity
 * (the file pinfold checked the digest of, not one swapped in since), and
 * opens /dev/fuse for stage 2's mount.
 */
static long prepare_fuse(long pid)
{
	char path[64];
	long r = 0;
	for (int i = 0; i < G.nops && r == 0; i++) {
		struct opref *o = &G.ops[i];
		u64 id[8], st[18];
		long fd, child;
		int nfds = 0, fds[1];
		char b[4];
		if (o->op->kind != OP_FUSE)
			continue;
		if (!o->a || !o->d || parse_u64s(o->d, id, 8) < 0) {
			report(ST_FUSE, EINVAL, i, "bad image identity");
			return -EINVAL;
		}
		fd = sys4(__NR_openat, AT_FDCWD, o->a, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		if (fd < 0) {
			report(ST_FUSE, fd, i, o->a);
			return fd;
		}
		o->fd = (int)fd;
		if ((r = sys2(__NR_fstat, fd, st)) < 0) {
			report(ST_FUSE, r, i, o->a);
			return r;
		}
		/* struct stat: dev, ino, nlink, mode|uid, gid|pad, rdev, size,
		 * blksize, blocks, atime, atime_ns, mtime, mtime_ns, ctime, ctime_ns */
		if (st[0] != id[0] || st[1] != id[1] || st[6] != id[2] || st[11] != id[3] || st[12] != id[4] ||
		    st[13] != id[5] || st[14] != id[6]) {
			report(ST_FUSE, ESTALE, i, o->a);
			return -ESTALE;
		}
		procpath(path, pid, "ns/user");
		fuse_ns = sys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
		if (fuse_ns < 0) {
			report(ST_FUSE, fuse_ns, i, path);
			return fuse_ns;
		}
		r = sys4(__NR_socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fuse_sock);
		if (r < 0) {
			sys1(__NR_close, fuse_ns);
			report(ST_FUSE, r, i, "socketpair");
			return r;
		}
		child = pf_clone(SIGCHLD, helper_stack + sizeof helper_stack, fuse_open_main, 0);
		if (child < 0)
			r = child;
		else {
			int st2 = 0;
			sys1(__NR_close, fuse_sock[1]);
			fuse_sock[1] = -1;
			r = recv_fds(fuse_sock[0], b, sizeof b, fds, 1, &nfds);
			sys4(__NR_wait4, child, &st2, WALL, 0);
			if (r >= 0 && nfds != 1)
				r = (st2 >> 8) == 2 ? -EACCES : -EPERM;
		}
		if (fuse_sock[1] >= 0)
			sys1(__NR_close, fuse_sock[1]);
		sys1(__NR_close, fuse_sock[0]);
		sys1(__NR_close, fuse_ns);
		if (r < 0) {
			report(ST_FUSE, r, i, "/dev/fuse");
			return r;
		}
		o->fuse = fds[0];
		r = 0;
	}
	return r;
}

static int stage2(void *arg);
static char stage2_stack[256 * 1024];

/*
 * G.go tells stage 2 how far stage 1 got: 1 once the id maps are written,
 * 2 once the cgroups and idmapped mounts are ready, -1 to give up.
 */
static void release(int v)
{
	G.go = v;
	sys4(__NR_futex, &G.go, FUTEX_WAKE, 1, 0);
}

static __attribute__((noreturn)) void waiter_main(int argc, char **argv, char **envp);

void pf_main(long *sp)
{
	long n, pid, r = 0;
	i32 p32;
	/* Run from a descriptor (/proc/self/fd/N), the process would be named
	 * "N" in ps and pgrep. */
	if (sp[0] >= 1 && !memcmp((char *)sp[1], "pinfold-wait", 13)) {
		sys5(__NR_prctl, PR_SET_NAME, (long)"pinfold-wait", 0, 0, 0);
		waiter_main((int)sp[0], (char **)(sp + 1), (char **)(sp + 2 + sp[0]));
	}
	sys5(__NR_prctl, PR_SET_NAME, (long)"pinfold-init", 0, 0, 0);
	/* A process group of our own, which stage 2 inherits: the terminal's
	 * Ctrl-C is for the supervisor, which forwards it. Were the init in
	 * the supervisor's group, the terminal's SIGINT (not forwarded: it
	 * does not come from the supervisor) could still be pending when the
	 * supervisor's arrives, and the second one of a signal is dropped. */
	sys2(__NR_setpgid, 0, 0);
	G.umask = (u32)sys1(__NR_umask, 0);
	sys3(__NR_fcntl, SOCK, F_SETFD, FD_CLOEXEC);
	n = recv_msg(spawnbuf, sizeof spawnbuf, 0, 0, 0);
	if (n < 8 || rd32(spawnbuf) != M_SPAWN || parse_spawn(spawnbuf, n) < 0) {
		report(ST_CONFIG, EINVAL, -1, "bad spawn message");
		die(1);
	}
	tmark(1);
	/* Into the sandbox's cgroups first (C_CGSELF): stage 2 is born there. */
	for (int i = 0; i < G.ncgself; i++) {
		if ((r = write_file(G.cgself[i], "0", 1)) < 0) {
			report(ST_CGROUP, r, -1, G.cgself[i]);
			die(1);
		}
	}
	/* The cgroup namespace is made by stage 2 once it is in its cgroups
	 * (when it has M_EXEC). */
	pid = pf_clone(CLONE_VM | CLONE_FILES | CLONE_PARENT | (G.nsflags & ~(u64)CLONE_NEWCGROUP) | SIGCHLD,
		       stage2_stack + sizeof stage2_stack, stage2, 0);
	if (pid < 0) {
		report(ST_CLONE, pid, -1, 0);
		die(1);
	}
	/* First thing: the supervisor must be able to kill and reap stage 2
	 * whatever happens next. */
	tmark(2);
	p32 = (i32)pid;
	send_simple(M_PID, &p32, 4);
	if (G.uidmap)
		r = write_maps(pid, G.uidmap, G.gidmap, G.setgroups);
	if (r < 0)
		goto fail;
	/* Stage 2 switches ids while the supervisor finishes the config. */
	tmark(3);
	release(1);
	n = recv_msg(cfgbuf, sizeof cfgbuf, 0, 0, 0);
	if (n < 8 || rd32(cfgbuf) != M_CONFIG || parse_config(cfgbuf, n) < 0) {
		if (n != 0) /* n == 0: the supervisor went away */
			report(ST_CONFIG, EINVAL, -1, "bad config message");
		r = -EINVAL;
		goto fail;
	}
	tmark(4);
	for (int i = 0; r == 0 && i < G.ncgroups; i++) {
		char num[24];
		utoa(num, (unsigned long)pid);
		if ((r = write_file(G.cgroups[i], num, slen(num))) < 0)
			report(ST_CGROUP, r, -1, G.cgroups[i]);
	}
	if (r == 0 && G.nidmap)
		r = prepare_idmaps(pid);
	if (r == 0 && G.nfuse)
		r = prepare_fuse(pid);
	if (r < 0)
		goto fail;
	tmark(5);
	release(2);
	die(0);
fail:
	sys2(__NR_kill, pid, SIGKILL);
	release(-1);
	die(1);
}

/* ---- stage 2: building the root ---------------------------------------- */

static char pathbuf[8192];

/* hostpath maps a host path to where the host root sits after the first pivot. */
static const char *hostpath(const char *p)
{
	pathbuf[0] = 0;
	if (scat(pathbuf, sizeof pathbuf, "/.old") < 0 || scat(pathbuf, sizeof pathbuf, p) < 0)
		return 0;
	return pathbuf;
}

static long stat_mode(const char *path, u32 *mode)
{
	u8 stx[256];
	long r = sys5(__NR_statx, AT_FDCWD, path, 0, STATX_TYPE, stx);
	if (r == 0) {
		u16 m;
		memcpy(&m, stx + 28, 2);
		*mode = m;
	}
	return r;
}

static char daemon_stack[16384];
static char daemon_args[2][64];

#ifndef CLONE_NEWNS
#define CLONE_NEWNS 0x00020000
#endif
#define S_IFLNK 0120000
#define FSOPEN_CLOEXEC 1
#define FSMOUNT_CLOEXEC 1
#define FSCONFIG_CMD_CREATE 6
#define ATTR_RDONLY 0x1
#define ATTR_NOSUID 0x2
#define ATTR_NODEV 0x4
#define ATTR_NOEXEC 0x8

/* What of the host the daemon sees: its program and libraries. */
static const char *const daemon_dirs[] = {"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"};
#define NDAEMONDIRS (int)(sizeof daemon_dirs / sizeof daemon_dirs[0])
static int daemon_fds[NDAEMONDIRS];
static char daemon_links[NDAEMONDIRS][256];

static int daemon_path(char *p, size_t cap, const char *name)
{
	p[0] = 0;
	return scat(p, cap, "/.old/") < 0 || scat(p, cap, name) < 0 ? -1 : 0;
}

/*
 * daemon_root gives squashfuse a mount namespace of its own whose root
 * holds only the host's system directories (read-only, as the host base
 * shows them: its program and libraries) and a /proc of the sandbox's pid
 * namespace (for /proc/self/fd), not the host's root: a squashfs crafted
 * to exploit squashfuse reaches no more of the host than a sandbox on the
 * host base sees.
 */
static long daemon_root(void)
{
	char p[64];
	long r, fs, proc;
	if ((r = sys1(__NR_unshare, CLONE_NEWNS)) < 0)
		return r;
	for (int i = 0; i < NDAEMONDIRS; i++) {
		u8 stx[256];
		u16 m;
		daemon_fds[i] = -1;
		daemon_links[i][0] = 0;
		if (daemon_path(p, sizeof p, daemon_dirs[i]) < 0)
			return -ENAMETOOLONG;
		if (sys5(__NR_statx, AT_FDCWD, p, AT_SYMLINK_NOFOLLOW, STATX_TYPE, stx) < 0)
			continue;
		memcpy(&m, stx + 28, 2);
		if ((m & S_IFMT) == S_IFLNK) {
			r = sys4(__NR_readlinkat, AT_FDCWD, p, daemon_links[i], sizeof daemon_links[i] - 1);
			if (r <= 0)
				return r < 0 ? r : -EINVAL;
			daemon_links[i][r] = 0;
		} else if ((m & S_IFMT) == S_IFDIR) {
			struct mount_attr a;
			long fd = sys3(__NR_open_tree, AT_FDCWD, p, OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
			if (fd < 0)
				return fd;
			memset(&a, 0, sizeof a);
			a.attr_set = ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV;
			if ((r = sys5(__NR_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a)) < 0)
				return r;
			daemon_fds[i] = (int)fd;
		}
	}
	/* A proc of the sandbox's pid namespace, made while the host's proc
	 * is still visible in this namespace (which the kernel requires). */
	if ((fs = sys2(__NR_fsopen, "proc", FSOPEN_CLOEXEC)) < 0)
		return fs;
	if ((r = sys5(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0)) < 0)
		return r;
	if ((proc = sys3(__NR_fsmount, fs, FSMOUNT_CLOEXEC, ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC)) < 0)
		return proc;
	/* The new root hides the host's under it, in this namespace only. */
	if ((r = sys5(__NR_mount, "tmpfs", "/.old", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16k")) < 0)
		return r;
	for (int i = 0; i < NDAEMONDIRS; i++) {
		if (daemon_path(p, sizeof p, daemon_dirs[i]) < 0)
			return -ENAMETOOLONG;
		if (daemon_links[i][0] && (r = sys3(__NR_symlinkat, daemon_links[i], AT_FDCWD, p)) < 0)
			return r;
		if (daemon_fds[i] >= 0 &&
		    ((r = sys3(__NR_mkdirat, AT_FDCWD, p, 0755)) < 0 ||
		     (r = sys5(__NR_move_mount, daemon_fds[i], "", AT_FDCWD, p, MOVE_MOUNT_F_EMPTY_PATH)) < 0))
			return r;
	}
	if ((r = sys3(__NR_mkdirat, AT_FDCWD, "/.old/proc", 0555)) < 0 ||
	    (r = sys5(__NR_move_mount, proc, "", AT_FDCWD, "/.old/proc", MOVE_MOUNT_F_EMPTY_PATH)) < 0)
		return r;
	if ((r = sys1(__NR_chroot, "/.old")) < 0 || (r = sys1(__NR_chdir, "/")) < 0)
		return r;
	/* The command's own seccomp filter: nothing the daemon does can be
	 * more than what the command may do. */
	if ((r = sys5(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
		return r;
	if (G.seccomp_len) {
		struct sock_fprog f = {(u16)(G.seccomp_len / 8), (void *)G.seccomp};
		if ((r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f)) < 0)
			return r;
	}
	return 0;
}

/*
 * daemon_main is squashfuse, forked from stage 2 once the FUSE mount is
 * made: it lives in the sandbox's namespaces (so it dies with them) and
 * sees the host's root, where its program and libraries are.
 */
static int daemon_main(void *arg)
{
	struct opref *o = arg;
	u64 none = 0;
	char *argv[9], *envp[1] = {0};
	char opt[40];
	u64 id[8];
	sys4(__NR_rt_sigprocmask, SIG_SETMASK, &none, 0, 8);
	sys5(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (parse_u64s(o->d, id, 8) < 0 || sys3(__NR_fcntl, o->fd, F_SETFD, 0) < 0 ||
	    sys3(__NR_fcntl, o->fuse, F_SETFD, 0) < 0)
		return 126;
	memcpy(daemon_args[0], "/proc/self/fd/", 15);
	utoa(daemon_args[0] + 14, (unsigned long)o->fd);
	memcpy(daemon_args[1], "/dev/fd/", 9);
	utoa(daemon_args[1] + 8, (unsigned long)o->fuse);
	memcpy(opt, "offset=", 8);
	utoa(opt + 7, (unsigned long)id[7]);
	if (daemon_root() < 0)
		return 126;
	argv[0] = (char *)"squashfuse";
	/* -s: one thread, so that the daemon takes one task of the sandbox's
	 * pids limit, not libfuse's up to ten. */
	argv[1] = (char *)"-f";
	argv[2] = (char *)"-s";
	argv[3] = (char *)"-o";
	argv[4] = opt;
	argv[5] = daemon_args[0];
	argv[6] = daemon_args[1];
	argv[7] = 0;
	sys3(__NR_execve, o->c, argv, envp);
	return 127;
}

static long mount_fuse(struct opref *o)
{
	char data[128];
	long r, pid;
	memcpy(data, "fd=", 4);
	utoa(data + 3, (unsigned long)o->fuse);
	if (scat(data, sizeof data, ",rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions") < 0)
		return -ENAMETOOLONG;
	r = sys5(__NR_mount, "pinfold-app", o->b, "fuse.squashfuse", MS_RDONLY | MS_NOSUID | MS_NODEV, data);
	if (r == 0) {
		pid = pf_clone(SIGCHLD, daemon_stack + sizeof daemon_stack, daemon_main, o);
		if (pid < 0)
			r = pid;
	}
	/* Only the daemon holds the device now: if it dies, the mount fails
	 * with ENOTCONN instead of hanging. */
	sys1(__NR_close, o->fuse);
	sys1(__NR_close, o->fd);
	o->fuse = o->fd = -1;
	return r;
}

static long do_op(struct opref *o)
{
	const struct op *op = o->op;
	const char *src = o->a;
	long r, fd;
	u32 mode;
	if (src && (op->flags & OPF_HOSTSRC) && !(src = hostpath(o->a)))
		return -ENAMETOOLONG;
	switch (op->kind) {
	case OP_MKDIR:
		r = sys3(__NR_mkdirat, AT_FDCWD, o->b, op->mode);
		return r == -EEXIST ? 0 : r;
	case OP_MKFILE:
		/* An empty op only makes a mount point: never truncate what is there. */
		fd = sys4(__NR_openat, AT_FDCWD, o->b,
			  O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (o->alen ? O_TRUNC : 0), op->mode);
		if (fd < 0)
			return fd;
		r = o->alen ? sys3(__NR_write, fd, o->a, o->alen) : 0;
		sys1(__NR_close, fd);
		return r < 0 ? r : 0;
	case OP_SYMLINK:
		return sys3(__NR_symlinkat, o->a, AT_FDCWD, o->b);
	case OP_MOUNT:
		return sys5(__NR_mount, src, o->b, o->c, op->mflags, o->d);
	case OP_BIND:
		if ((op->flags & OPF_OPTIONAL) && stat_mode(src, &mode) == -ENOENT)
			return 0;
		r = sys5(__NR_mount, src, o->b, 0, MS_BIND | op->mflags, 0);
		if (r < 0 || !op->attr)
			return r;
		{
			struct mount_attr a;
			memset(&a, 0, sizeof a);
			a.attr_set = op->attr;
			return sys5(__NR_mount_setattr, AT_FDCWD, o->b, (op->mflags & MS_REC) ? AT_RECURSIVE : 0,
				    &a, sizeof a);
		}
	case OP_IDMAP:
		if (o->fd < 0) /* an optional source that does not exist */
			return 0;
		r = sys5(__NR_move_mount, o->fd, "", AT_FDCWD, o->b, MOVE_MOUNT_F_EMPTY_PATH);
		sys1(__NR_close, o->fd);
		o->fd = -1;
		return r;
	case OP_MASK:
		r = stat_mode(o->b, &mode);
		if (r == -ENOENT)
			return 0;
		if (r < 0)
			return r;
		if ((mode & S_IFMT) == S_IFDIR)
			return sys5(__NR_mount, "tmpfs", o->b, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
				    "size=0,mode=0555");
		return sys5(__NR_mount, "/dev/null", o->b, 0, MS_BIND, 0);
	case OP_CHMOD:
		return sys4(__NR_fchmodat, AT_FDCWD, o->b, op->mode, 0);
	case OP_UMOUNT:
		return sys2(__NR_umount2, o->b, MNT_DETACH);
	case OP_RMDIR:
		return sys3(__NR_unlinkat, AT_FDCWD, o->b, 0x200 /* AT_REMOVEDIR */);
	case OP_FUSE:
		return mount_fuse(o);
	case OP_SETATTR: {
		struct mount_attr a;
		memset(&a, 0, sizeof a);
		a.attr_set = op->attr;
		return sys5(__NR_mount_setattr, AT_FDCWD, o->b, (op->mflags & MS_REC) ? AT_RECURSIVE : 0, &a,
			    sizeof a);
	}
	}
	return -EINVAL;
}

static long build_root(void)
{
	long r;
	char old[4096];
	if ((r = sys5(__NR_mount, 0, "/", 0, MS_REC | MS_PRIVATE, 0)) < 0) {
		report(ST_PRIVATE, r, -1, "/");
		return r;
	}
	if ((r = sys5(__NR_mount, "tmpfs", G.scratch, "tmpfs", MS_NOSUID | MS_NODEV,
		      "mode=0755,size=4m,nr_inodes=16384")) < 0) {
		report(ST_SCRATCH, r, -1, G.scratch);
		return r;
	}
	old[0] = 0;
	if (scat(old, sizeof old, G.scratch) < 0 || scat(old, sizeof old, "/.old") < 0)
		return -ENAMETOOLONG;
	if ((r = sys3(__NR_mkdirat, AT_FDCWD, old, 0700)) < 0 ||
	    (r = sys2(__NR_pivot_root, G.scratch, old)) < 0 || (r = sys1(__NR_chdir, "/")) < 0) {
		report(ST_PIVOT, r, -1, G.scratch);
		return r;
	}
	for (int i = 0; i < G.nops; i++) {
		if ((r = do_op(&G.ops[i])) < 0) {
			report(ST_OP, r, i, G.ops[i].b);
			return r;
		}
	}
	if ((r = sys2(__NR_umount2, "/.old", MNT_DETACH)) < 0 ||
	    (r = sys3(__NR_unlinkat, AT_FDCWD, "/.old", 0x200 /* AT_REMOVEDIR */)) < 0) {
		report(ST_DETACH, r, -1, "/.old");
		return r;
	}
	if (G.rootro &&
	    (r = sys5(__NR_mount, 0, "/", 0, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, 0)) < 0) {
		report(ST_ROOTRO, r, -1, "/");
		return r;
	}
	if (G.hostname && (r = sys2(__NR_sethostname, G.hostname, slen(G.hostname))) < 0) {
		report(ST_HOSTNAME, r, -1, G.hostname);
		return r;
	}
	if (G.loup) {
		struct ifreq ifr;
		long s = sys3(__NR_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		memset(&ifr, 0, sizeof ifr);
		memcpy(ifr.name, "lo", 3);
		r = s < 0 ? s : sys3(__NR_ioctl, s, SIOCGIFFLAGS, &ifr);
		if (r >= 0) {
			ifr.u.flags |= IFF_UP;
			r = sys3(__NR_ioctl, s, SIOCSIFFLAGS, &ifr);
		}
		if (s >= 0)
			sys1(__NR_close, s);
		if (r < 0) {
			report(ST_LOUP, r, -1, "lo");
			return r;
		}
	}
	return 0;
}

/*
 * Landlock, the second layer: once the root is built (so that the rules'
 * paths are the sandbox's), PID 1 makes a ruleset that grants each rule's
 * access beneath its path and nothing else; the command's child applies it
 * right after no_new_privs. Paths that do not exist are skipped: the root
 * decides what is there, the ruleset only narrows it.
 */
#define LL_CREATE_RULESET 444
#define LL_ADD_RULE 445
#define LL_RESTRICT_SELF 446
#define LL_RULE_PATH_BENEATH 1
#define O_PATH 010000000
/* What a rule on a file (not a directory) may grant: execute, write,
 * read, truncate, ioctl on devices. */
#define LL_FILE_ACCESS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))

struct ll_ruleset_attr {
	u64 fs, net, scoped;
};
struct __attribute__((packed)) ll_path_beneath {
	u64 allowed;
	i32 fd;
};

static long landlock_ruleset(void)
{
	struct ll_ruleset_attr a = {G.ll_fs, G.ll_net, 0};
	long fd, r;
	G.llfd = -1;
	if (!G.ll_fs)
		return 0;
	if ((fd = sys3(LL_CREATE_RULESET, &a, sizeof a, 0)) < 0) {
		report(ST_LANDLOCK, fd, -1, "creating the ruleset");
		return fd;
	}
	/* Above 0..2, which the command's child replaces with its stdio. */
	if (fd < 3) {
		long hi = sys3(__NR_fcntl, fd, F_DUPFD_CLOEXEC, 3);
		sys1(__NR_close, fd);
		if ((fd = hi) < 0) {
			report(ST_LANDLOCK, fd, -1, "creating the ruleset");
			return fd;
		}
	}
	for (int i = 0; i < G.nllrules; i++) {
		const char *path = G.llrules[i] + 8;
		struct ll_path_beneath pb;
		u8 stx[256];
		u16 m;
		long pfd = sys4(__NR_openat, AT_FDCWD, path, O_PATH | O_CLOEXEC, 0);
		if (pfd == -ENOENT)
			continue;
		if (pfd < 0) {
			report(ST_LANDLOCK, pfd, -1, path);
			return pfd;
		}
		pb.allowed = rd64(G.llrules[i]) & G.ll_fs;
		pb.fd = (i32)pfd;
		r = sys5(__NR_statx, pfd, "", AT_EMPTY_PATH, STATX_TYPE, stx);
		if (r == 0) {
			memcpy(&m, stx + 28, 2);
			if ((m & S_IFMT) != S_IFDIR)
				pb.allowed &= LL_FILE_ACCESS;
			r = pb.allowed ? sys4(LL_ADD_RULE, fd, LL_RULE_PATH_BENEATH, &pb, 0) : 0;
		}
		sys1(__NR_close, pfd);
		if (r < 0) {
			report(ST_LANDLOCK, r, -1, path);
			return r;
		}
	}
	G.llfd = (int)fd;
	return 0;
}

/* ---- stage 2: the command ---------------------------------------------- */

#define MAXARGS 32768

static struct {
	char *argv[MAXARGS];
	char *envp[MAXARGS];
	const char *cwd;
	const char *path; /* PATH from the command's environment */
	int tty, setsid;
	struct winsize ws;
	int fds[3];
	int nfds;
	int slave;
	/* the vfork child reports a failure here (it shares our memory) */
	volatile int fail_step;
	volatile int fail_err;
} X;

static char child_stack[64 * 1024];

static int parse_exec(long n)
{
	const char *p = execbuf + 8, *end = execbuf + n;
	struct rec r;
	int k, na = 0, ne = 0;
	while ((k = next_rec(&p, end, &r)) > 0) {
		switch (r.tag) {
		case E_ARG:
			if (na == MAXARGS - 1)
				return -E2BIG;
			X.argv[na++] = (char *)r.data;
			break;
		case E_ENV:
			if (ne == MAXARGS - 1)
				return -E2BIG;
			X.envp[ne++] = (char *)r.data;
			if (!memcmp(r.data, "PATH=", 5))
				X.path = r.data + 5;
			break;
		case E_CWD:
			X.cwd = r.data;
			break;
		case E_TTY:
			X.tty = 1;
			memcpy(&X.ws.rows, r.data, 2);
			memcpy(&X.ws.cols, r.data + 2, 2);
			break;
		case E_SETSID:
			X.setsid = 1;
			break;
		}
	}
	X.argv[na] = 0;
	X.envp[ne] = 0;
	return k < 0 || na == 0 ? -EINVAL : 0;
}

static __attribute__((noreturn)) void child_fail(int step, long err)
{
	X.fail_step = step;
	X.fail_err = (int)(err < 0 ? -err : err);
	die(127);
}

/* exec_path runs argv[0], searching PATH like execvp when it has no slash. */
static long exec_path(void)
{
	const char *name = X.argv[0], *p = X.path ? X.path : "/usr/local/bin:/usr/bin:/bin";
	char buf[4096];
	long r, seen_eacces = 0;
	size_t nl = slen(name);
	for (const char *s = name; *s; s++)
		if (*s == '/')
			return sys3(__NR_execve, name, X.argv, X.envp);
	if (nl == 0)
		return -ENOENT;
	for (;;) {
		const char *e = p;
		size_t dl;
		while (*e && *e != ':')
			e++;
		dl = (size_t)(e - p);
		if (dl + 1 + nl + 1 <= sizeof buf) {
			if (dl) {
				memcpy(buf, p, dl);
				buf[dl++] = '/';
			}
			memcpy(buf + dl, name, nl + 1);
			r = sys3(__NR_execve, buf, X.argv, X.envp);
			if (r == -EACCES)
				seen_eacces = 1;
			else if (r != -ENOENT && r != -ENOTDIR)
				return r;
		}
		if (!*e)
			break;
		p = e + 1;
	}
	return seen_eacces ? -EACCES : -ENOENT;
}

static int child_main(void *arg)
{
	long r;
	int hi[3];
	u64 empty = 0;
	(void)arg;
	if ((X.setsid || X.tty) && (r = sys0(__NR_setsid)) < 0)
		child_fail(ST_STDIO, r);
	if (X.tty) {
		if ((r = sys3(__NR_ioctl, X.slave, TIOCSCTTY, 0)) < 0)
			child_fail(ST_PTY, r);
		X.fds[0] = X.fds[1] = X.fds[2] = X.slave;
		X.nfds = 3;
	}
	if (X.nfds != 3)
		child_fail(ST_STDIO, EINVAL);
	/* Move the descriptors out of 0..2 first so dup3 never sees old == new. */
	for (int i = 0; i < 3; i++)
		if ((hi[i] = (int)sys3(__NR_fcntl, X.fds[i], F_DUPFD_CLOEXEC, 10)) < 0)
			child_fail(ST_STDIO, hi[i]);
	for (int i = 0; i < 3; i++)
		if ((r = sys3(__NR_dup3, hi[i], i, 0)) < 0)
			child_fail(ST_STDIO, r);
	/*
	 * Descriptors pinfold's caller left open (without close-on-exec) stop
	 * here: the command gets its three streams only. Close-on-exec rather
	 * than closed, so that child_fail can still report.
	 */
	sys3(__NR_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
	if (X.cwd && (r = sys1(__NR_chdir, X.cwd)) < 0)
		child_fail(ST_CHDIR, r);
	sys1(__NR_umask, G.umask);
	for (int i = 0; i < G.nrlimits; i++) {
		struct rlimit64 l;
		const u8 *q = G.rlimits[i];
		l.cur = rd64((const char *)q + 8);
		l.max = rd64((const char *)q + 16);
		if ((r = sys4(__NR_prlimit64, 0, rd32((const char *)q), &l, 0)) < 0)
			child_fail(ST_RLIMIT, r);
	}
	for (u32 c = 0; c <= G.caplast; c++)
		if (!(G.caps & (1ULL << c)) && (r = sys2(__NR_prctl, PR_CAPBSET_DROP, c)) < 0)
			child_fail(ST_CAPS, r);
	if (G.caps && (r = sys2(__NR_prctl, PR_SET_KEEPCAPS, 1)) < 0)
		child_fail(ST_CAPS, r);
	if (G.has_user) {
		if (!G.setgroups && (r = sys2(__NR_setgroups, G.ngroups, G.groups)) < 0)
			child_fail(ST_GROUPS, r);
		if ((r = sys3(__NR_setresgid, G.gid, G.gid, G.gid)) < 0 ||
		    (r = sys3(__NR_setresuid, G.uid, G.uid, G.uid)) < 0)
			child_fail(ST_SETUID, r);
	}
	{
		u32 hdr[2] = {CAPV3, 0};
		u32 data[6] = {(u32)G.caps, (u32)G.caps, (u32)G.caps, (u32)(G.caps >> 32), (u32)(G.caps >> 32),
			       (u32)(G.caps >> 32)};
		if ((r = sys2(__NR_capset, hdr, data)) < 0)
			child_fail(ST_CAPS, r);
		sys5(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
		for (u32 c = 0; c <= G.caplast; c++)
			if ((G.caps & (1ULL << c)) &&
			    (r = sys5(__NR_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0)) < 0)
				child_fail(ST_CAPS, r);
	}
	if (G.nnp && (r = sys5(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
		child_fail(ST_NNP, r);
	if (G.llfd >= 0 && (r = sys2(LL_RESTRICT_SELF, G.llfd, 0)) < 0)
		child_fail(ST_LANDLOCK, r);
	if (G.seccomp_len) {
		struct sock_fprog f = {(u16)(G.seccomp_len / 8), (void *)G.seccomp};
		if ((r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f)) < 0)
			child_fail(ST_SECCOMP, r);
	}
	sys4(__NR_rt_sigprocmask, SIG_SETMASK, &empty, 0, 8);
	r = exec_path();
	child_fail(ST_EXEC, r);
}

static long open_pty(int *master)
{
	long m, s, r;
	int zero = 0;
	m = sys4(__NR_openat, AT_FDCWD, "/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC, 0);
	if (m < 0)
		return m;
	if ((r = sys3(__NR_ioctl, m, TIOCSPTLCK, &zero)) < 0 || (r = sys3(__NR_ioctl, m, TIOCSWINSZ, &X.ws)) < 0 ||
	    (s = sys3(__NR_ioctl, m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
		sys1(__NR_close, m);
		return r < 0 ? r : s;
	}
	*master = (int)m;
	X.slave = (int)s;
	return 0;
}

struct pollfd {
	int fd;
	short events, revents;
};
#define POLLIN 1
#define POLLHUP 0x10
#define POLLRDHUP 0x2000

/* await blocks until stage 1 has moved past state v. */
static void await(int v)
{
	int g;
	while ((g = G.go) == v)
		sys4(__NR_futex, &G.go, FUTEX_WAIT, v, 0);
	if (g < 0)
		die(1);
}

static int supervisor_gone(void)
{
	struct pollfd p = {SOCK, POLLRDHUP, 0};
	long zero[2] = {0, 0};
	return sys5(__NR_ppoll, &p, 1, zero, 0, 8) > 0 && (p.revents & (POLLHUP | POLLRDHUP));
}

/* if_ioctl runs one interface ioctl on a fresh socket of family af. */
static long if_ioctl(int af, unsigned long req, void *arg)
{
	long s = sys3(__NR_socket, af, SOCK_DGRAM | SOCK_CLOEXEC, 0), r;
	if (s < 0)
		return s;
	r = sys3(__NR_ioctl, s, req, arg);
	sys1(__NR_close, s);
	return r;
}

/*
 * add_addr6 gives interface ifindex the IPv6 address addr/prefix, through
 * rtnetlink, flagged IFA_F_NODAD, and waits for the kernel to route it
 * to this host. An address added by SIOCSIFADDR cannot be so flagged and
 * starts tentative, even on a TUN device (which does no DAD), until the
 * kernel's addrconf work runs; that work waits for the RTNL lock, for
 * seconds while other network namespaces and links come and go. A command
 * connecting meanwhile got ::1 as its source address, whose packets never
 * leave. Without DAD the address is a source at once, but its local route
 * still comes from that work: until then what is sent to the address
 * (the answer to a datagram) is dropped. So the route's notification is
 * awaited, at most 10 s.
 */
static long add_addr6(int ifindex, const u8 *addr, u32 prefix)
{
	struct {
		u32 len;
		u16 type, flags;
		u32 seq, pid;
		u8 family, prefixlen, ifa_flags, scope;
		i32 index;
		u16 alen, atype;
		u8 addr[16];
	} req;
	struct {
		u16 family, pad;
		u32 pid, groups;
	} sa = {AF_NETLINK, 0, 0, RTMGRP_IPV6_ROUTE};
	char b[2048];
	int acked = 0, routed = 0;
	long s = sys3(__NR_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), r;
	if (s < 0)
		return s;
	/* Subscribed before the address exists: no notification is missed. */
	if ((r = sys3(__NR_bind, s, &sa, sizeof sa)) < 0)
		goto out;
	memset(&req, 0, sizeof req);
	req.len = sizeof req;
	req.type = RTM_NEWADDR;
	req.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE;
	req.seq = 1;
	req.family = AF_INET6;
	req.prefixlen = (u8)prefix;
	req.ifa_flags = IFA_F_NODAD;
	req.index = ifindex;
	req.alen = 4 + 16;
	req.atype = IFA_ADDRESS;
	memcpy(req.addr, addr, 16);
	if ((r = sys6(__NR_sendto, s, (long)&req, sizeof req, 0, 0, 0)) < 0)
		goto out;
	r = 0;
	while (!acked || !routed) {
		struct pollfd p = {(int)s, POLLIN, 0};
		long ts[2] = {10, 0}, n;
		if (sys5(__NR_ppoll, &p, 1, ts, 0, 8) <= 0)
			break; /* not routed within 10 s: go on all the same */
		n = sys3(__NR_read, s, b, sizeof b);
		if (n == -EINTR)
			continue;
		if (n < 0) {
			r = n;
			break;
		}
		for (long off = 0; off + 16 <= n;) {
			const char *m = b + off;
			u32 len;
			u16 type;
			memcpy(&len, m, 4);
			memcpy(&type, m + 4, 2);
			if (len < 16 || off + len > (u32)n)
				break;
			if (type == NLMSG_ERROR && len >= 20) {
				i32 e;
				memcpy(&e, m + 16, 4);
				acked = 1;
				if (e < 0) {
					r = e;
					goto out;
				}
			} else if (type == RTM_NEWROUTE && len >= 28 && (u8)m[16] == AF_INET6 &&
				   (u8)m[17] == 128 && (u8)m[23] == RTN_LOCAL) {
				/* struct rtmsg, then its attributes: RTA_DST. */
				for (u32 a = 28; a + 4 <= len;) {
					u16 alen, atype;
					memcpy(&alen, m + a, 2);
					memcpy(&atype, m + a + 2, 2);
					if (alen < 4 || a + alen > len)
						break;
					if (atype == RTA_DST && alen == 20 && memcmp(m + a + 4, addr, 16) == 0)
						routed = 1;
					a += (alen + 3) & ~3u;
				}
			}
			off += (len + 3) & ~3u;
		}
	}
out:
	sys1(__NR_close, s);
	return r;
}

/*
 * setup_tun creates the TUN device of G.tun in the sandbox's network
 * namespace, gives it its addresses and routes, and hands it to the
 * supervisor, whose userspace network stack terminates its packets.
 */
static long setup_tun(void)
{
	const struct tunconf *t = G.tun;
	struct ifreq ifr;
	long fd, r;
	int ifd;
	fd = sys4(__NR_openat, AT_FDCWD, "/dev/net/tun", O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		report(ST_TUN, fd, -1, "/dev/net/tun");
		return fd;
	}
	memset(&ifr, 0, sizeof ifr);
	memcpy(ifr.name, t->name, 15);
	ifr.u.flags = IFF_TUN | IFF_NO_PI;
	if ((r = sys3(__NR_ioctl, fd, TUNSETIFF, &ifr)) < 0)
		goto fail;
	ifr.u.ivalue = (int)t->mtu;
	if ((r = if_ioctl(AF_INET, SIOCSIFMTU, &ifr)) < 0)
		goto fail;
	memset(&ifr.u, 0, sizeof ifr.u);
	ifr.u.sin.family = AF_INET;
	memcpy(ifr.u.sin.addr, t->addr4, 4);
	if ((r = if_ioctl(AF_INET, SIOCSIFADDR, &ifr)) < 0)
		goto fail;
	memset(&ifr.u, 0, sizeof ifr.u);
	ifr.u.sin.family = AF_INET;
	for (u32 i = 0; i < t->prefix4 && i < 32; i++)
		ifr.u.sin.addr[i / 8] |= (u8)(0x80 >> (i % 8));
	if ((r = if_ioctl(AF_INET, SIOCSIFNETMASK, &ifr)) < 0)
		goto fail;
	if (t->flags & TUN_ADDR6) {
		/* No router solicitation when the link comes up: the stack
		 * sends no advertisements, and a command that never uses the
		 * network then sends no packet, so the helper never builds a
		 * stack for it. A kernel without IPv6 has no such file. */
		char p[64] = "/proc/sys/net/ipv6/conf/", name[16];
		memcpy(name, t->name, 15);
		name[15] = 0;
		if (scat(p, sizeof p, name) == 0 && scat(p, sizeof p, "/accept_ra") == 0)
			write_file(p, "0", 1);
	}
	memset(&ifr.u, 0, sizeof ifr.u);
	if ((r = if_ioctl(AF_INET, SIOCGIFFLAGS, &ifr)) < 0)
		goto fail;
	ifr.u.flags |= IFF_UP;
	if ((r = if_ioctl(AF_INET, SIOCSIFFLAGS, &ifr)) < 0)
		goto fail;
	if (t->flags & TUN_ROUTE4) {
		struct rtentry rt;
		memset(&rt, 0, sizeof rt);
		rt.dst.family = rt.gateway.family = rt.genmask.family = AF_INET;
		rt.flags = RTF_UP;
		rt.dev = t->name;
		if ((r = if_ioctl(AF_INET, SIOCADDRT, &rt)) < 0)
			goto fail;
	}
	if (t->flags & TUN_ADDR6) {
		if ((r = if_ioctl(AF_INET, SIOCGIFINDEX, &ifr)) < 0)
			goto fail;
		ifd = ifr.u.ivalue;
		r = add_addr6(ifd, t->addr6, t->prefix6);
		if (r == -EAFNOSUPPORT || r == -EOPNOTSUPP)
			goto send; /* no IPv6 in this kernel */
		if (r < 0)
			goto fail;
		if (t->flags & TUN_ROUTE6) {
			struct in6_rtmsg rt;
			memset(&rt, 0, sizeof rt);
			rt.flags = RTF_UP;
			rt.metric = 1;
			rt.ifindex = ifd;
			if ((r = if_ioctl(AF_INET6, SIOCADDRT, &rt)) < 0)
				goto fail;
		}
	}
send:
	{
		u32 h[2] = {M_TUN, 0};
		int f = (int)fd;
		r = sendmsg_fds(h, 8, &f, 1);
	}
	/* The init keeps its descriptor (close-on-exec: the command never
	 * has it): the device then goes with the sandbox's network namespace,
	 * in the background, instead of when the supervisor closes its copy,
	 * which costs milliseconds on the supervisor's way out. */
	return r < 0 ? r : 0;
fail:
	report(ST_TUN, r, -1, t->name);
	sys1(__NR_close, fd);
	return r;
}

static int stage2(void *arg)
{
	u64 all = ~0ULL;
	long r = 0, n, cmd;
	int status = 0, master;
	(void)arg;
	sys5(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* Our parent (CLONE_PARENT: the supervisor, or a launcher that may
	 * exit at once) may have died before the signal was armed: then
	 * nobody would ever release us. Its end of the socket tells. */
	if (supervisor_gone())
		die(1);
	sys4(__NR_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
	/* Dispositions start clean: ignored signals must not leak into the command. */
	for (int s = 1; s <= 64; s++) {
		struct kernel_sigaction sa;
		if (s == SIGKILL || s == SIGSTOP)
			continue;
		memset(&sa, 0, sizeof sa);
		sys4(__NR_rt_sigaction, s, &sa, 0, 8);
	}
	await(0);
	/* The TUN device first: opening /dev/net/tun may need the ids the init
	 * still has. */
	if (G.tun && setup_tun() < 0)
		die(1);
	/* Landlock's TCP rules do not cover MPTCP sockets (Go's listeners'
	 * default): with TCP denied, MPTCP is turned off in the sandbox's own
	 * network namespace, so such sockets fail and programs fall back to
	 * TCP, which the ruleset denies. A kernel without MPTCP has nothing to
	 * turn off; where the write fails otherwise, the empty network
	 * namespace is still the first layer. (Asked in M_SPAWN: M_CONFIG may
	 * not be read yet.) */
	if (G.nomptcp)
		write_file("/proc/sys/net/mptcp/enabled", "0", 1);
	/* Nothing in the sandbox may ptrace or open /proc/1 of this process. */
	sys5(__NR_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (G.has_initid) {
		if ((r = sys3(__NR_setresgid, G.init_gid, G.init_gid, G.init_gid)) < 0 ||
		    (!G.setgroups && (r = sys2(__NR_setgroups, 0, 0)) < 0) ||
		    (r = sys3(__NR_setresuid, G.init_uid, G.init_uid, G.init_uid)) < 0) {
			report(ST_SETID, r, -1, 0);
			die(1);
		}
		/* Changing credentials cleared the parent-death signal: set it
		 * again, then make sure the supervisor did not die meanwhile
		 * (its end of the socket hangs up when it does). */
		sys5(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (supervisor_gone())
			die(1);
	}
	tmark(11);
	await(1);
	tmark(12);
	if (build_root() < 0)
		die(1);
	tmark(13);
	if (landlock_ruleset() < 0)
		die(1);
	tmark(17);
	send_simple(M_READY, 0, 0);

	n = recv_msg(execbuf, sizeof execbuf, X.fds, 3, &X.nfds);
	if (n <= 0)
		die(0); /* the supervisor went away */
	if (n < 8 || rd32(execbuf) != M_EXEC)
		r = -EINVAL;
	else
		r = parse_exec(n);
	if (r < 0) {
		report(ST_EXECMSG, r, -1, 0);
		die(1);
	}
	/*
	 * The cgroup namespace is made once this process is in its cgroups,
	 * so that they are its root: stage 1 joined them before the root was
	 * built, or (a launch record's replay) the launcher did while it was
	 * built, and sent M_EXEC only then.
	 */
	if ((G.nsflags & CLONE_NEWCGROUP) && (r = sys1(__NR_unshare, CLONE_NEWCGROUP)) < 0) {
		report(ST_CLONE, r, -1, "cgroup namespace");
		die(1);
	}
	tmark(14);
	if (X.tty) {
		if ((r = open_pty(&master)) < 0) {
			report(ST_PTY, r, -1, "/dev/ptmx");
			die(1);
		}
		{
			u32 h[2] = {M_PTY, 0};
			sendmsg_fds(h, 8, &master, 1);
		}
		sys1(__NR_close, master);
	} else if (X.nfds != 3) {
		/* No stdio given: the command reads and writes /dev/null. */
		long fd = sys4(__NR_openat, AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC, 0);
		if (fd < 0) {
			report(ST_STDIO, fd, -1, "/dev/null");
			die(1);
		}
		X.fds[0] = X.fds[1] = X.fds[2] = (int)fd;
		X.nfds = 3;
	}
	cmd = pf_clone(CLONE_VM | CLONE_VFORK | SIGCHLD, child_stack + sizeof child_stack, child_main, 0);
	if (cmd < 0) {
		report(ST_FORK, cmd, -1, 0);
		die(1);
	}
	if (X.fail_step) {
		sys4(__NR_wait4, cmd, 0, WALL, 0);
		report((u32)X.fail_step, X.fail_err, -1, X.fail_step == ST_CHDIR ? X.cwd : X.argv[0]);
		die(1);
	}
	tmark(15);
	for (int i = 0; i < X.nfds; i++)
		sys1(__NR_close, X.fds[i]);
	if (X.tty)
		sys1(__NR_close, X.slave);
	{
		i32 c = (i32)cmd;
		send_simple(M_STARTED, &c, 4);
	}

	for (;;) {
		struct siginfo si;
		long sig = sys4(__NR_rt_sigtimedwait, &all, &si, 0, 8);
		if (sig < 0)
			continue;
		if (sig == SIGCHLD) {
			long p;
			int st, done = 0;
			while ((p = sys4(__NR_wait4, -1, &st, WNOHANG | WALL, 0)) > 0)
				if (p == cmd) {
					status = st;
					done = 1;
				}
			if (done) {
				tmark(16);
				break;
			}
			continue;
		}
		/* Forward only what the supervisor sent: it is outside our pid
		 * namespace, so the kernel shows it to us as pid 0. */
		if (si.code <= SI_USER && si.pid == 0 && sys2(__NR_kill, -cmd, sig) < 0)
			sys2(__NR_kill, cmd, sig);
	}
	/* Nothing the command started may outlive it. ESRCH: there was
	 * nothing else (a zombie counts), so nothing writes any more. */
	{
		u32 body[2] = {(u32)status, sys2(__NR_kill, -1, SIGKILL) == -ESRCH ? EXIT_ALONE : 0};
		if (G.tmpcheck) {
			u64 st[16];
			if (sys2(__NR_statfs, G.tmpcheck, st) == 0 && st[4] == 0)
				body[1] |= EXIT_TMP_FULL;
		}
		if (G.trace) {
			char b[8 + 8 + sizeof G.marks];
			u32 h[2] = {M_EXIT, (u32)(8 + 16 * G.ntrace)};
			memcpy(b, h, 8);
			memcpy(b + 8, body, 8);
			memcpy(b + 16, G.marks, 16 * (size_t)G.ntrace);
			sendmsg_fds(b, 16 + 16 * (size_t)G.ntrace, 0, 0);
		} else
			send_simple(M_EXIT, body, 8);
	}
	die(0);
	return 0;
}

/* ---- the waiter ---------------------------------------------------------
 *
 * pinfold (the supervisor) execs this once the command runs, when it has
 * nothing left to do but wait: the Go runtime's memory is released while
 * the command runs, signals are forwarded without it, and the exit is as
 * cheap as a small C program's. The sandbox's PID 1 is our child (the
 * thread that exec'd us spawned it), so its parent-death signal still ties
 * it to us.
 *
 *   pinfold-wait SOCKFD INITPID DEADLINE TIMEOUTMSG TMPFULLMSG [-n NETFD]
 *                [-m MEMEVENTS OOMMSG MEMMSG] [-p PIDSEVENTS PIDSMSG] [-g CGDIR]...
 *                [-l HITFILE] [PINFOLD STORE ID]
 *
 * DEADLINE is CLOCK_MONOTONIC nanoseconds, 0 for none. The messages are
 * printed on stderr when the timeout fires or /tmp filled up.
 *
 * With -g the sandbox runs in cgroups (each CGDIR, made and joined before
 * the command started): once the command ended and the sandbox is gone the
 * waiter reads which limit was hit, prints it (as the Go side would: the
 * oom_kill count of MEMEVENTS, memory.events or v1's memory.oom_control,
 * gives OOMMSG when the command was killed and MEMMSG when it exited;
 * the max count of PIDSEVENTS gives PIDSMSG) and removes the groups.
 * With -l it writes the limits hit (timeout, memory, pids, tmp: the names
 * and order of sandbox.Result.LimitsHit, ", "-separated) to HITFILE, for
 * a session's record; nothing when none was.
 *
 * The waiter reaps every child but the sandbox's PID 1 as it ends (the
 * init's first stage, which exits once the sandbox's PID 1 runs): none is
 * left a zombie for the sandbox's life.
 *
 * With -n, NETFD is the network helper's control socket (see netpolicy's
 * helper.go): once the command ended the waiter shuts its end and reads
 * until the helper's "bye" (by then the helper printed its summary of
 * what the policy blocked), at most 2 s.
 *
 * With PINFOLD, STORE and ID the run keeps a changeset (STORE/changesets/ID,
 * whose lock the waiter inherited): once the command ended and the sandbox
 * is gone, an empty changeset is removed here, as most runs write nothing
 * (one with a disk image, --disk, never: its writes are in the image);
 * otherwise the waiter becomes "PINFOLD __finish STORE ID STATUS", which
 * records and reports it in Go and exits with STATUS.
 */

#define SFD_CLOEXEC O_CLOEXEC
#define POLLIN 1
#define SIGINT 2
#define SIGHUP 1
#define SIGQUIT 3
#define SIGUSR1 10
#define SIGUSR2 12
#define SIGTERM 15

struct signalfd_siginfo {
	u32 signo;
	char rest[124];
};

static long parse_num(const char *s)
{
	long v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (*s++ - '0');
	return v;
}

static void say(const char *msg)
{
	if (msg && *msg) {
		sys3(__NR_write, 2, msg, slen(msg));
		sys3(__NR_write, 2, "\n", 1);
	}
}

#define SHUT_WR 1

/* netdone waits for the network helper's last word (see above). */
static void netdone(int fd)
{
	char b[4096];
	sys2(__NR_shutdown, fd, SHUT_WR);
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		long ts[2] = {2, 0}, n;
		if (sys5(__NR_ppoll, &p, 1, ts, 0, 8) <= 0)
			return;
		n = sys3(__NR_read, fd, b, sizeof b - 1);
		if (n == -EINTR)
			continue;
		if (n <= 0)
			return;
		b[n] = 0;
		for (long i = 0; i + 5 <= n; i++)
			if (!memcmp(b + i, "\"bye\"", 5))
				return;
	}
}

/*
 * trash takes the empty changeset dir (open as fd) out of the store at
 * once, into STORE/trash (where pinfold's own trash goes), and deletes it
 * in a detached child: the run's status need not wait for the file
 * system. 0 once it is out of the store.
 */
static long trash(const char *store, const char *id, const char *dir, long fd)
{
	char dst[4096], num[24];
	long pid;
	dst[0] = 0;
	if (scat(dst, sizeof dst, store) < 0 || scat(dst, sizeof dst, "/trash") < 0)
		return -1;
	sys3(__NR_mkdirat, AT_FDCWD, dst, 0700);
	utoa(num, (unsigned long)sys0(__NR_getpid));
	if (scat(dst, sizeof dst, "/") < 0 || scat(dst, sizeof dst, id) < 0 || scat(dst, sizeof dst, "-w") < 0 ||
	    scat(dst, sizeof dst, num) < 0 || sys2(__NR_rename, dir, dst) < 0)
		return -1;
	pid = sys0(__NR_fork);
	if (pid == 0) {
		/* Nothing of the caller's: a shell waiting for the run's
		 * output to end must not wait for this. */
		sys3(__NR_close_range, 0, ~0U, 0);
		sys0(__NR_setsid);
		fd = sys4(__NR_openat, AT_FDCWD, dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
		if (fd >= 0 && rmtree(fd, 6, 0) == 0)
			sys3(__NR_unlinkat, AT_FDCWD, dst, AT_REMOVEDIR);
		die(0);
	}
	/* Without a child pinfold's trash cleaning deletes it later. */
	return 0;
}

/*
 * finish ends the run with the command's status: the network helper's
 * report (netfd, -1 for none), then the changeset (argv: PINFOLD STORE
 * ID, when argc is 3; see above).
 */
static __attribute__((noreturn)) void finish(int argc, char **argv, char **envp, long init, int code, int netfd,
					     int alone)
{
	char dir[4096], num[24];
	long fd, r;
	char *fargv[] = {"pinfold", "__finish", 0, 0, num, 0};
	if (netfd >= 0)
		netdone(netfd);
	if (argc < 3)
		die(code);
	/* Once every process of the sandbox is gone, its changeset is final.
	 * When the command ended alone it already is: an empty one is taken
	 * out of the store without waiting for the sandbox's teardown (its
	 * mounts' detach waits for an RCU grace period), as a run without a
	 * changeset does; otherwise the sandbox and its mounts go first. */
	if (!alone)
		sys4(__NR_wait4, init, 0, WALL, 0);
	dir[0] = 0;
	if (scat(dir, sizeof dir, argv[1]) < 0 || scat(dir, sizeof dir, "/changesets/") < 0 ||
	    scat(dir, sizeof dir, argv[2]) < 0)
		goto go;
	fd = sys4(__NR_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		goto go;
	/* With --disk the writes are in the volume's image, not in r0/upper:
	 * pinfold __finish copies them back. */
	if (sys4(__NR_faccessat, fd, "disk.img", 0, 0) == 0) {
		sys1(__NR_close, fd);
		goto go;
	}
	{
		long up = sys4(__NR_openat, fd, "r0/upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
		r = up < 0 ? up : rmtree(up, 0, 1);
		if (up >= 0)
			sys1(__NR_close, up);
	}
	if (r == 0 && trash(argv[1], argv[2], dir, fd) == 0)
		die(code);
	if (r == 0)
		r = rmtree(fd, 6, 0);
	sys1(__NR_close, fd);
	if (r == 0 && sys3(__NR_unlinkat, AT_FDCWD, dir, AT_REMOVEDIR) == 0)
		die(code);
go:
	if (alone)
		sys4(__NR_wait4, init, 0, WALL, 0);
	utoa(num, (unsigned long)code);
	fargv[2] = argv[1], fargv[3] = argv[2];
	sys3(__NR_execve, argv[0], fargv, envp);
	say("pinfold: the run's changeset was kept but not recorded: run any pinfold command to recover it");
	die(code);
}

/* The waiter's cgroups (-m, -p, -g). */
#define MAXCG 8
static struct {
	const char *mem, *oommsg, *memmsg, *pids, *pidsmsg;
	const char *dirs[MAXCG];
	int n;
	const char *hitfile; /* -l: where the limits hit are written */
} CG;

/* event reads KEY's count from a cgroup's "key value" lines: 0 if none. */
static long event(const char *path, const char *key)
{
	char b[1024];
	long fd, n, k = slen(key);
	if (!path || (fd = sys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0)) < 0)
		return 0;
	n = sys3(__NR_read, fd, b, sizeof b - 1);
	sys1(__NR_close, fd);
	if (n <= 0)
		return 0;
	b[n] = 0;
	for (char *l = b; *l; l++) {
		if ((l == b || l[-1] == '\n') && !memcmp(l, key, (size_t)k) && l[k] == ' ')
			return parse_num(l + k + 1);
	}
	return 0;
}

#define EBUSY 16

/*
 * limits reports the limits the sandbox hit and removes its cgroups, once
 * its PID 1 is gone (killed says whether the command was killed, for the
 * memory message). A group whose last processes are still leaving is
 * retried for about a second, like the Go side's cgroup.Group.Remove; one
 * left behind is pinfold clean's.
 */
#define HIT_MEMORY 1
#define HIT_PIDS 2

static int limits(long init, int killed)
{
	int hit = 0;
	if (!CG.n)
		return 0;
	sys4(__NR_wait4, init, 0, WALL, 0);
	if (event(CG.mem, "oom_kill") > 0) {
		say(killed ? CG.oommsg : CG.memmsg);
		hit |= HIT_MEMORY;
	}
	if (event(CG.pids, "max") > 0) {
		say(CG.pidsmsg);
		hit |= HIT_PIDS;
	}
	for (int i = CG.n - 1; i >= 0; i--) {
		long ts[2] = {0, 100000};
		for (int round = 0; round < 100; round++) {
			long r = sys3(__NR_unlinkat, AT_FDCWD, CG.dirs[i], AT_REMOVEDIR);
			if (r != -EBUSY && r != -EINTR)
				break;
			sys2(__NR_nanosleep, ts, 0);
			if (ts[1] < 10000000)
				ts[1] *= 2;
		}
	}
	CG.n = 0;
	return hit;
}

/*
 * hits writes the limits hit, as sandbox.Result.LimitsHit names them and
 * in its order, to the -l file (a session's record reads it): nothing is
 * written when none was.
 */
static void hits(int timedout, int cg, int tmpfull)
{
	char b[64];
	long fd;
	b[0] = 0;
	if (!CG.hitfile || !(timedout || cg || tmpfull))
		return;
	if (timedout)
		scat(b, sizeof b, "timeout, ");
	if (cg & HIT_MEMORY)
		scat(b, sizeof b, "memory, ");
	if (cg & HIT_PIDS)
		scat(b, sizeof b, "pids, ");
	if (tmpfull)
		scat(b, sizeof b, "tmp, ");
	b[slen(b) - 2] = '\n';
	b[slen(b) - 1] = 0;
	fd = sys4(__NR_openat, AT_FDCWD, CG.hitfile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		sys3(__NR_write, fd, b, slen(b));
		sys1(__NR_close, fd);
	}
}

/* reap_others reaps the waiter's ended children but the sandbox's PID 1. */
static void reap_others(long init)
{
	for (;;) {
		u32 si[32];
		memset(si, 0, sizeof si);
		/* Peek first: PID 1 must stay for finish's wait4. */
		if (sys5(__NR_waitid, 0 /* P_ALL */, 0, si, 4 /* WEXITED */ | WNOHANG | 0x01000000 /* WNOWAIT */ | WALL, 0) < 0 ||
		    si[4] == 0 || si[4] == (u32)init)
			return;
		sys4(__NR_wait4, (long)si[4], 0, WALL, 0);
	}
}

/* end reports how the command ended and finishes the run with code. */
static __attribute__((noreturn)) void end(char **argv, int nfin, char **fin, char **envp, long init, int netfd,
					  int code, int timedout, int killed, int tmpfull, int alone)
{
	int hit;
	if (timedout)
		say(argv[4]);
	hit = limits(init, killed && !timedout);
	if (tmpfull)
		say(argv[5]);
	hits(timedout, hit, tmpfull);
	finish(nfin, fin, envp, init, code, netfd, alone);
}

static __attribute__((noreturn)) void waiter_main(int argc, char **argv, char **envp)
{
	int sock, sfd;
	long init, deadline;
	u64 set = 0;
	const int fwd[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM};
	int timedout = 0, netfd = -1, nfin;
	char **fin;
	if (argc < 6)
		die(125);
	fin = argv + 6, nfin = argc - 6;
	for (;;) {
		if (nfin >= 2 && !memcmp(fin[0], "-n", 3)) {
			netfd = (int)parse_num(fin[1]);
			fin += 2, nfin -= 2;
		} else if (nfin >= 4 && !memcmp(fin[0], "-m", 3)) {
			CG.mem = fin[1], CG.oommsg = fin[2], CG.memmsg = fin[3];
			fin += 4, nfin -= 4;
		} else if (nfin >= 3 && !memcmp(fin[0], "-p", 3)) {
			CG.pids = fin[1], CG.pidsmsg = fin[2];
			fin += 3, nfin -= 3;
		} else if (nfin >= 2 && !memcmp(fin[0], "-l", 3)) {
			CG.hitfile = fin[1];
			fin += 2, nfin -= 2;
		} else if (nfin >= 2 && !memcmp(fin[0], "-g", 3) && CG.n < MAXCG) {
			CG.dirs[CG.n++] = fin[1];
			fin += 2, nfin -= 2;
		} else
			break;
	}
	sock = (int)parse_num(argv[1]);
	init = parse_num(argv[2]);
	deadline = parse_num(argv[3]);
	for (unsigned i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
		set |= 1ULL << (fwd[i] - 1);
	set |= 1ULL << (SIGCHLD - 1);
	sys4(__NR_rt_sigprocmask, SIG_BLOCK, &set, 0, 8);
	sfd = (int)sys4(__NR_signalfd4, -1, &set, 8, SFD_CLOEXEC);
	/* A child that ended before the signalfd sent no SIGCHLD to read. */
	reap_others(init);
	for (;;) {
		struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
		long ts[2], *tp = 0, r;
		if (deadline && !timedout) {
			long now[2];
			long long left;
			sys2(__NR_clock_gettime, 1, now);
			left = deadline - (now[0] * 1000000000LL + now[1]);
			if (left <= 0) {
				/* Kill the whole sandbox: its PID 1 takes everything with it. */
				sys2(__NR_kill, init, SIGKILL);
				timedout = 1;
				continue;
			}
			ts[0] = left / 1000000000LL;
			ts[1] = left % 1000000000LL;
			tp = ts;
		}
		r = sys5(__NR_ppoll, p, sfd >= 0 ? 2 : 1, tp, 0, 8);
		if (r < 0)
			continue;
		if (sfd >= 0 && (p[1].revents & POLLIN)) {
			struct signalfd_siginfo si;
			if (sys3(__NR_read, sfd, &si, sizeof si) == (long)sizeof si) {
				if (si.signo == SIGCHLD)
					reap_others(init);
				else
					sys2(__NR_kill, init, si.signo);
			}
		}
		if (p[0].revents) {
			char b[64];
			long n = sys3(__NR_read, sock, b, sizeof b);
			u32 h[4];
			if (n < 0 && n != -EINTR)
				n = 0;
			if (n == 0) /* the init died without a report */
				end(argv, nfin, fin, envp, init, netfd, timedout ? 124 : 128 + SIGKILL, timedout, 1, 0, 0);
			if (n >= 16) {
				memcpy(h, b, 16);
				if (h[0] == M_EXIT) {
					int st = (int)h[2], tmpfull = (h[3] & EXIT_TMP_FULL) != 0;
					int alone = (h[3] & EXIT_ALONE) != 0;
					if (timedout)
						end(argv, nfin, fin, envp, init, netfd, 124, 1, 0, tmpfull, alone);
					if ((st & 0x7f) == 0)
						end(argv, nfin, fin, envp, init, netfd, (st >> 8) & 0xff, 0, 0, tmpfull,
						    alone);
					end(argv, nfin, fin, envp, init, netfd, 128 + (st & 0x7f), 0, 1, tmpfull, alone);
				}
			}
		}
	}
}
