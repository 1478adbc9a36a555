/*
 * What the sandbox init (init.c) and the launcher (launch.c) share: types,
 * kernel ABI constants, the few C library functions they need, and passing
 * descriptors over the supervisor socket. Both link no C library.
 */
#ifndef PF_MINI_H
#define PF_MINI_H

#include <asm/unistd.h>

#if defined(__x86_64__)
#include "sys_amd64.h"
#else
#error "unsupported architecture"
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef unsigned long size_t;

/* Kernel ABI constants (from the uapi headers; spelled out to stay freestanding). */
#define AT_FDCWD -100
#define AT_SYMLINK_NOFOLLOW 0x100
#define AT_EMPTY_PATH 0x1000
#define AT_RECURSIVE 0x8000
#define O_RDONLY 0
#define O_WRONLY 1
#define O_RDWR 2
#define O_CREAT 0100
#define O_NOCTTY 0400
#define O_TRUNC 01000
#define O_NOFOLLOW 0400000
#define O_CLOEXEC 02000000
#define F_DUPFD_CLOEXEC 1030
#define F_SETFD 2
#define FD_CLOEXEC 1
#define OPEN_TREE_CLONE 1
#define MOVE_MOUNT_F_EMPTY_PATH 4
#define MOUNT_ATTR_IDMAP 0x100000
#define MS_RDONLY 1
#define MS_NOSUID 2
#define MS_NODEV 4
#define MS_NOEXEC 8
#define MS_REMOUNT 32
#define MS_BIND 4096
#define MS_REC 16384
#define MS_PRIVATE (1 << 18)
#define MNT_DETACH 2
#define CLONE_VM 0x100
#define CLONE_FILES 0x400
#define CLONE_VFORK 0x4000
#define CLONE_PARENT 0x8000
#define CLONE_NEWUSER 0x10000000
#define CLONE_NEWCGROUP 0x02000000
#define SIGKILL 9
#define SIGSTOP 19
#define SIGCHLD 17
#define SIG_BLOCK 0
#define SIG_SETMASK 2
#define SI_USER 0
#define WNOHANG 1
#define WALL 0x40000000
#define PR_SET_PDEATHSIG 1
#define PR_SET_DUMPABLE 4
#define PR_SET_NAME 15
#define PR_SET_KEEPCAPS 8
#define PR_CAPBSET_DROP 24
#define PR_SET_NO_NEW_PRIVS 38
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#define SECCOMP_SET_MODE_FILTER 1
#define CAPV3 0x20080522
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define TIOCSCTTY 0x540E
#define TIOCSWINSZ 0x5414
#define TIOCSPTLCK 0x40045431
#define TIOCGPTPEER 0x5441
#define SIOCGIFFLAGS 0x8913
#define SIOCSIFFLAGS 0x8914
#define IFF_UP 1
#define AF_INET 2
#define AF_INET6 10
#define EAFNOSUPPORT 97
#define TUNSETIFF 0x400454ca
#define IFF_TUN 0x0001
#define IFF_NO_PI 0x1000
#define SIOCADDRT 0x890B
#define SIOCSIFADDR 0x8916
#define SIOCSIFNETMASK 0x891c
#define SIOCSIFMTU 0x8922
#define SIOCGIFINDEX 0x8933
#define RTF_UP 1
#define SOCK_DGRAM 2
#define SOCK_RAW 3
#define AF_NETLINK 16
#define NETLINK_ROUTE 0
#define RTM_NEWADDR 20
#define RTM_NEWROUTE 24
#define RTMGRP_IPV6_ROUTE 0x400
#define RTN_LOCAL 2
#define RTA_DST 1
#define NLMSG_ERROR 2
#define NLM_F_REQUEST 0x1
#define NLM_F_ACK 0x4
#define NLM_F_EXCL 0x200
#define NLM_F_CREATE 0x400
#define IFA_ADDRESS 1
#define IFA_F_NODAD 0x02
#define EOPNOTSUPP 95
#define SOCK_CLOEXEC 02000000
#define SOL_SOCKET 1
#define SCM_RIGHTS 1
#define MSG_NOSIGNAL 0x4000
#define MSG_CMSG_CLOEXEC 0x40000000
#define STATX_TYPE 1
#define S_IFMT 0170000
#define S_IFDIR 0040000
#define ENOENT 2
#define EINTR 4
#define EACCES 13
#define EEXIST 17
#define ESRCH 3
#define ENOTDIR 20
#define EINVAL 22
#define E2BIG 7
#define ENAMETOOLONG 36

struct iovec {
	void *base;
	size_t len;
};
struct msghdr {
	void *name;
	u32 namelen;
	struct iovec *iov;
	size_t iovlen;
	void *control;
	size_t controllen;
	u32 flags;
};
struct cmsghdr {
	size_t len;
	i32 level;
	i32 type;
};

/* Freestanding helpers; the compiler may also emit calls to mem*. */
void *memset(void *d, int c, size_t n)
{
	u8 *p = d;
	while (n--)
		*p++ = (u8)c;
	return d;
}
void *memcpy(void *d, const void *s, size_t n)
{
	u8 *a = d;
	const u8 *b = s;
	while (n--)
		*a++ = *b++;
	return d;
}
void *memmove(void *d, const void *s, size_t n)
{
	u8 *a = d;
	const u8 *b = s;
	if (a < b)
		while (n--)
			*a++ = *b++;
	else
		while (n--)
			a[n] = b[n];
	return d;
}
int memcmp(const void *x, const void *y, size_t n)
{
	const u8 *a = x, *b = y;
	for (; n; n--, a++, b++)
		if (*a != *b)
			return *a - *b;
	return 0;
}
static inline size_t slen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}
/* scat appends s to the NUL-terminated buffer d of size cap; -1 if it does not fit. */
static inline int scat(char *d, size_t cap, const char *s)
{
	size_t n = slen(d), m = slen(s);
	if (n + m + 1 > cap)
		return -1;
	memcpy(d + n, s, m + 1);
	return 0;
}
static inline void utoa(char *d, unsigned long v)
{
	char t[24];
	int n = 0;
	do
		t[n++] = (char)('0' + v % 10);
	while (v /= 10);
	while (n)
		*d++ = t[--n];
	*d = 0;
}

#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

static inline __attribute__((noreturn)) void die(int code)
{
	for (;;)
		sys1(__NR_exit_group, code);
}

static inline long send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = {(void *)buf, len};
	struct msghdr m;
	union {
		struct cmsghdr h;
		char b[sizeof(struct cmsghdr) + 4 * sizeof(int)];
	} cm;
	memset(&m, 0, sizeof m);
	m.iov = &iov;
	m.iovlen = 1;
	if (nfds > 0) {
		memset(&cm, 0, sizeof cm);
		cm.h.len = sizeof(struct cmsghdr) + (size_t)nfds * sizeof(int);
		cm.h.level = SOL_SOCKET;
		cm.h.type = SCM_RIGHTS;
		memcpy(cm.b + sizeof(struct cmsghdr), fds, (size_t)nfds * sizeof(int));
		m.control = &cm;
		m.controllen = cm.h.len;
	}
	return sys3(__NR_sendmsg, sock, &m, MSG_NOSIGNAL);
}

/* recv_fds reads one message from sock and up to maxfds passed descriptors. */
static inline long recv_fds(int sock, char *buf, size_t cap, int *fds, int maxfds, int *nfds)
{
	struct iovec iov = {buf, cap};
	struct msghdr m;
	union {
		struct cmsghdr h;
		char b[sizeof(struct cmsghdr) + 8 * sizeof(int)];
	} cm;
	long n;
	memset(&m, 0, sizeof m);
	memset(&cm, 0, sizeof cm);
	m.iov = &iov;
	m.iovlen = 1;
	m.control = &cm;
	m.controllen = sizeof cm;
	do
		n = sys3(__NR_recvmsg, sock, &m, MSG_CMSG_CLOEXEC);
	while (n == -EINTR);
	if (nfds)
		*nfds = 0;
	if (n > 0 && m.controllen >= sizeof(struct cmsghdr) && cm.h.level == SOL_SOCKET &&
	    cm.h.type == SCM_RIGHTS) {
		int got = (int)((cm.h.len - sizeof(struct cmsghdr)) / sizeof(int));
		int *in = (int *)(cm.b + sizeof(struct cmsghdr));
		for (int i = 0; i < got; i++) {
			if (fds && i < maxfds)
				fds[(*nfds)++] = in[i];
			else
				sys1(__NR_close, in[i]);
		}
	}
	return n;
}

/* The getdents64 record. */
struct dirent64 {
	u64 ino;
	long long off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

#define DT_DIR 4
#define O_DIRECTORY 0200000
#define AT_REMOVEDIR 0x200

static inline int dots(const char *n) { return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])); }

/*
 * rmtree removes what dirfd holds, depth levels deep at most (a
 * changeset's own directories, which are few and small). With only_empty
 * it instead reports whether the directory holds nothing. 0 on success.
 */
static inline long rmtree(long dirfd, int depth, int only_empty)
{
	char buf[1024];
	long n, r = 0;
	for (;;) {
		n = sys3(__NR_getdents64, dirfd, buf, sizeof buf);
		if (n <= 0)
			return n < 0 ? n : r;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->reclen;
			if (dots(d->name))
				continue;
			if (only_empty || depth <= 0)
				return -1;
			if (d->type == DT_DIR) {
				long sub = sys4(__NR_openat, dirfd, d->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
				if (sub < 0)
					return sub;
				r = rmtree(sub, depth - 1, 0);
				sys1(__NR_close, sub);
				if (r < 0)
					return r;
			}
			r = sys3(__NR_unlinkat, dirfd, d->name, d->type == DT_DIR ? AT_REMOVEDIR : 0);
			if (r < 0)
				return r;
		}
	}
}

#endif
