/*
 * pinfold's launch cache: the start of a `pinfold run` that ran before.
 *
 * A Go program pays for its runtime before main (threads, heap, package
 * initialisation: about 4 ms on a small VM), more than the whole sandbox
 * set-up costs. So the pinfold binary enters here first (the Go linker's
 * -E pinfold_entry; launch_amd64.s holds this file as a flat blob), with
 * nothing initialised, and looks for a launch record: what the Go side
 * sent the init the last time this exact command line ran in this
 * directory with this environment (see launch.go for the writer and the
 * format). When the record exists and everything it depends on is
 * unchanged, this code replays it: it starts the init from a sealed memfd,
 * sends the same three messages, and execs the init as the waiter, as the
 * Go side does. Otherwise it returns and the Go runtime starts as usual.
 *
 * Rules of the blob: no writable globals (the blob lives in the read-only
 * text segment; state is on the stack or mmap'ed), no absolute relocations
 * (it runs wherever the Go linker put it), no C library.
 */
#include "proto.h"
#include "mini.h"
#include "launch.h"

#define S_IFREG 0100000
#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_PRIVATE 2
#define MAP_ANONYMOUS 0x20
#define MFD_CLOEXEC 1
#define MFD_ALLOW_SEALING 2
#define MFD_EXEC 0x10
#define F_ADD_SEALS 1033
#define SEALS 0xf /* F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE */
#define AF_UNIX 1
#define SOCK_SEQPACKET 5
#define F_GETFD 1
#define FNV_BASIS 0xcbf29ce484222325ULL
#define FNV_BASIS2 0x84222325cbf29ce4ULL /* a second, independent hash of the key */

struct goslice {
	const char *p;
	long n, cap;
};

struct kstat {
	u64 dev, ino, nlink;
	u32 mode, uid, gid, pad0;
	u64 rdev;
	long size, blksize, blocks;
	u64 atime, atime_ns, mtime, mtime_ns, ctime, ctime_ns;
	long unused[3];
};

static inline int streq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

static inline const char *getenv_(char **envp, const char *name)
{
	size_t n = slen(name);
	for (; *envp; envp++)
		if (!memcmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return 0;
}

/* put appends n bytes to the buffer at *p if they fit below end. */
static inline int put(char **p, const char *end, const void *s, size_t n)
{
	if ((size_t)(end - *p) < n)
		return -1;
	memcpy(*p, s, n);
	*p += n;
	return 0;
}

static inline int puts0(char **p, const char *end, char tag, const char *s)
{
	if (put(p, end, &tag, 1) < 0)
		return -1;
	return put(p, end, s, slen(s) + 1);
}

/* storedir writes the store's directory as store.DefaultDir finds it. */
static int storedir(char *d, size_t cap, char **envp)
{
	const char *s = getenv_(envp, "PINFOLD_STORE"), *x;
	d[0] = 0;
	if (s && *s)
		return *s == '/' ? scat(d, cap, s) : -1;
	if (sys0(__NR_geteuid) == 0)
		return scat(d, cap, "/var/lib/pinfold");
	if ((x = getenv_(envp, "XDG_DATA_HOME")) && *x == '/')
		return scat(d, cap, x) | scat(d, cap, "/pinfold");
	if ((x = getenv_(envp, "HOME")) && *x == '/')
		return scat(d, cap, x) | scat(d, cap, "/.local/share/pinfold");
	return -1;
}

static void *map_anon(size_t n)
{
	long p = sys6(__NR_mmap, 0, (long)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p < 0 && p > -4096 ? 0 : (void *)p;
}

/*
 * key builds the record's key (launch.go: key) into a fresh mapping;
 * *head is the length of its head (the magic, the arguments through "--"
 * and the directory), which names a config hint (launch.go: ConfigHintFile).
 */
static char *key(int argc, char **argv, int cmd, char **envp, size_t *len, size_t *mapped, size_t *head)
{
	char cwd[4096], boot[40], *k, *p, *end;
	size_t need = 256 + sizeof cwd;
	u32 ids[4];
	long n, fd;
	if (sys2(__NR_getcwd, cwd, sizeof cwd) <= 0 || cwd[0] != '/')
		return 0;
	fd = sys3(__NR_open, "/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	n = sys3(__NR_read, fd, boot, 36);
	sys1(__NR_close, fd);
	if (n != 36)
		return 0;
	boot[36] = 0;
	for (int i = 1; i < cmd; i++)
		need += slen(argv[i]) + 2;
	for (char **e = envp; *e; e++)
		need += slen(*e) + 2;
	if (!(k = map_anon(need)))
		return 0;
	*mapped = need;
	p = k, end = k + need;
	ids[0] = (u32)sys0(__NR_getuid), ids[1] = (u32)sys0(__NR_geteuid);
	ids[2] = (u32)sys0(__NR_getgid), ids[3] = (u32)sys0(__NR_getegid);
	put(&p, end, LAUNCH_KEY_MAGIC, sizeof LAUNCH_KEY_MAGIC);
	for (int i = 1; i < cmd && i < argc; i++)
		puts0(&p, end, 'a', argv[i]);
	puts0(&p, end, 'c', cwd);
	*head = (size_t)(p - k);
	for (char **e = envp; *e; e++)
		if (**e)
			puts0(&p, end, 'e', *e);
	put(&p, end, "u", 1);
	put(&p, end, ids, sizeof ids);
	puts0(&p, end, 'b', boot);
	*len = (size_t)(p - k);
	return k;
}

static inline u64 fnv1a(u64 h, const char *p, size_t n)
{
	while (n--)
		h = (h ^ (u8)*p++) * 0x100000001b3ULL;
	return h;
}

/* dep_ok reports whether one dependency still holds. */
static int dep_ok(const char *data, u32 len)
{
	struct launch_dep d;
	struct kstat st;
	const char *path = data + sizeof d;
	size_t pl;
	long r;
	if (len <= sizeof d || data[len - 1] != 0)
		return 0;
	memcpy(&d, data, sizeof d);
	pl = slen(path);
	switch (d.kind) {
	case DEP_ABSENT:
	case DEP_LABSENT:
		r = sys4(__NR_newfstatat, AT_FDCWD, path, &st, d.kind == DEP_LABSENT ? AT_SYMLINK_NOFOLLOW : 0);
		return r == -ENOENT || r == -ENOTDIR;
	case DEP_LINK: {
		char buf[4096];
		const char *want = path + pl + 1;
		if (want >= data + len)
			return 0;
		r = sys3(__NR_readlink, path, buf, sizeof buf - 1);
		if (r < 0)
			return 0;
		buf[r] = 0;
		return streq(buf, want);
	}
	case DEP_ATTR:
	case DEP_LATTR:
		r = sys4(__NR_newfstatat, AT_FDCWD, path, &st, d.kind == DEP_LATTR ? AT_SYMLINK_NOFOLLOW : 0);
		return r == 0 && st.mode == d.mode && st.uid == d.uid && st.gid == d.gid;
	case DEP_STAT:
	case DEP_LSTAT:
		r = sys4(__NR_newfstatat, AT_FDCWD, path, &st, d.kind == DEP_LSTAT ? AT_SYMLINK_NOFOLLOW : 0);
		return r == 0 && st.dev == d.dev && st.ino == d.ino && st.mode == d.mode && st.uid == d.uid &&
		       st.gid == d.gid && st.size == d.size && st.mtime == (u64)d.mtime &&
		       st.mtime_ns == (u64)d.mtime_ns && st.ctime == (u64)d.ctime && st.ctime_ns == (u64)d.ctime_ns;
	}
	return 0;
}

/* empty_ok reports whether a directory is empty or absent. */
static int empty_ok(const char *path)
{
	char buf[512];
	long fd = sys3(__NR_open, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0), n, off;
	if (fd == -ENOENT)
		return 1;
	if (fd < 0)
		return 0;
	n = sys3(__NR_getdents64, fd, buf, sizeof buf);
	sys1(__NR_close, fd);
	for (off = 0; n > 0 && off < n;) {
		u16 reclen;
		const char *name = buf + off + 19;
		memcpy(&reclen, buf + off + 16, 2);
		if (!(name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))))
			return 0;
		off += reclen;
	}
	return n >= 0;
}

struct launch {
	const char *spawn, *config, *exec, *waitmsg;
	u32 spawn_len, config_len, exec_len, wait_len;
	u32 flags;
	u64 timeout;
	/* R_CHANGESET */
	const u32 *idoffs;
	u32 nids, uid, gid, upmode;
	const char *store, *exe, *metatail;
	/* the new changeset: its id, directory and lock */
	char id[CHANGESET_ID_LEN + 1];
	char csdir[4096];
	long lockfd;
	/* R_NET, and the connection to the helper (-1: none) */
	const char *netsock, *netruns, *netcfg;
	u32 netcfg_len;
	long netfd;
	/* R_CGROUP, and the groups made from it */
	const char *cg;
	u32 cg_len;
	int ncg, nself;
	char cgdir[LAUNCH_MAX_CGROUPS][256];
	u8 cgv1[LAUNCH_MAX_CGROUPS]; /* a v1 group: stage 1 moves itself in (C_CGSELF) */
	char memev[300], pidsev[300];
	const char *oommsg, *memmsg, *pidsmsg;
};

/* check parses the record and verifies the key and every dependency. */
static int check(const char *rec, size_t n, const char *k, size_t klen, struct launch *l)
{
	const char *p = rec + 16, *end = rec + n;
	int have_key = 0;
	u32 version;
	if (n < 16 || memcmp(rec, LAUNCH_MAGIC, 8))
		return 0;
	memcpy(&version, rec + 8, 4);
	if (version != LAUNCH_VERSION)
		return 0;
	while (end - p >= 8) {
		u16 tag;
		u32 len;
		const char *data = p + 8;
		memcpy(&tag, p, 2);
		memcpy(&len, p + 4, 4);
		if ((u64)len > (u64)(end - data))
			return 0;
		p = data + ((len + 7) & ~7u);
		switch (tag) {
		case R_KEY: {
			/* The key's length and two hashes: the record keeps no environment values. */
			u64 d[3] = {klen, fnv1a(FNV_BASIS, k, klen), fnv1a(FNV_BASIS2, k, klen)};
			if (len != sizeof d || memcmp(data, d, sizeof d))
				return 0;
			have_key = 1;
			break;
		}
		case R_DEP:
			if (!dep_ok(data, len))
				return 0;
			break;
		case R_EMPTY:
			if (!len || data[len - 1] || !empty_ok(data))
				return 0;
			break;
		case R_SPAWN:
			l->spawn = data, l->spawn_len = len;
			break;
		case R_CONFIG:
			l->config = data, l->config_len = len;
			break;
		case R_EXEC:
			l->exec = data, l->exec_len = len;
			break;
		case R_WAIT:
			l->waitmsg = data, l->wait_len = len;
			break;
		case R_OPTS:
			if (len < 16)
				return 0;
			memcpy(&l->flags, data, 4);
			memcpy(&l->timeout, data + 8, 8);
			break;
		case R_NET: {
			const char *q = data, *qend = data + len;
			l->netsock = q;
			q += slen(q) + 1;
			if (q >= qend || *l->netsock != '/')
				return 0;
			l->netruns = q;
			q += slen(q) + 1;
			if (q >= qend || *l->netruns != '/')
				return 0;
			l->netcfg = q, l->netcfg_len = (u32)(qend - q);
			break;
		}
		case R_CGROUP:
			if (!len || data[len - 1])
				return 0;
			l->cg = data, l->cg_len = len;
			break;
		case R_CHANGESET: {
			const char *q, *qend = data + len;
			u32 cnt;
			if (len < 16 || data[len - 1])
				return 0;
			memcpy(&cnt, data, 4);
			memcpy(&l->uid, data + 4, 4);
			memcpy(&l->gid, data + 8, 4);
			memcpy(&l->upmode, data + 12, 4);
			if (l->upmode & ~01777u)
				return 0;
			if (cnt == 0 || cnt > 64 || (u64)len < 16 + 4 * (u64)cnt + 3)
				return 0;
			l->idoffs = (const u32 *)(data + 16), l->nids = cnt;
			q = data + 16 + 4 * cnt;
			l->store = q, q += slen(q) + 1;
			if (q >= qend)
				return 0;
			l->exe = q, q += slen(q) + 1;
			if (q >= qend)
				return 0;
			l->metatail = q;
			if (*l->store != '/' || *l->exe != '/')
				return 0;
			break;
		}
		default:
			return 0; /* a record this build does not know */
		}
	}
	if (!have_key || !l->spawn || !l->config || !l->exec || !l->waitmsg || l->wait_len < 2 ||
	    l->waitmsg[l->wait_len - 1] || slen(l->waitmsg) + 2 > l->wait_len)
		return 0; /* the two messages must both be there */
	for (u32 i = 0; i < l->nids; i++)
		if ((u64)l->idoffs[i] + CHANGESET_ID_LEN > l->config_len)
			return 0;
	return 1;
}

/* ---- a new changeset (R_CHANGESET), as changeset.Create makes one ---- */
/* Its meta.json is changeset.ReplayMeta's format: TestReplayMetaMatchesGo
 * (../replaymeta_test.go) checks the bytes against Go's. */

#define LOCK_EX 2
#define LOCK_NB 4
#define CLOCK_REALTIME 0

/* jsonstr appends s as a JSON string. */
static int jsonstr(char **p, const char *end, const char *s)
{
	static const char hx[] = "0123456789abcdef";
	if (put(p, end, "\"", 1) < 0)
		return -1;
	for (; *s; s++) {
		u8 c = (u8)*s;
		char e[6] = {'\\', 'u', '0', '0', hx[c >> 4], hx[c & 15]};
		int r;
		if (c == '"' || c == '\\')
			e[1] = (char)c, r = put(p, end, e, 2);
		else if (c < 0x20)
			r = put(p, end, e, 6);
		else
			r = put(p, end, s, 1);
		if (r < 0)
			return -1;
	}
	return put(p, end, "\"", 1);
}

/* rfc3339 writes the UTC time sec.nsec as 2006-01-02T15:04:05.999999999Z. */
static void rfc3339(char *d, long sec, long nsec)
{
	/* Days since 1970-01-01 to a civil date (proleptic Gregorian). */
	long days = sec / 86400 + 719468, rem = sec % 86400;
	long era = days / 146097, doe = days - era * 146097;
	long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	long doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
	long m = mp < 10 ? mp + 3 : mp - 9;
	long v[7] = {yoe + era * 400 + (m <= 2), m, doy - (153 * mp + 2) / 5 + 1, rem / 3600, rem / 60 % 60, rem % 60, nsec};
	static const char sep[7] = {'-', '-', 'T', ':', ':', '.', 'Z'};
	static const char width[7] = {4, 2, 2, 2, 2, 2, 9};
	for (int i = 0; i < 7; i++) {
		for (int j = width[i] - 1; j >= 0; j--, v[i] /= 10)
			d[j] = (char)('0' + v[i] % 10);
		d += width[i];
		*d++ = sep[i];
	}
	*d = 0;
}

static void drop_changeset(struct launch *l)
{
	long fd;
	if (!l->csdir[0])
		return;
	fd = sys3(__NR_open, l->csdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd >= 0) {
		rmtree(fd, 6, 0); /* what a failed launch made of its changeset */
		sys1(__NR_close, fd);
	}
	sys3(__NR_unlinkat, AT_FDCWD, l->csdir, AT_REMOVEDIR);
	if (l->lockfd >= 0)
		sys1(__NR_close, l->lockfd);
	l->csdir[0] = 0, l->lockfd = -1;
}

/*
 * new_changeset creates the run's changeset (directories, lock, meta.json
 * with the status "running") and returns the M_CONFIG message with its
 * id, or 0 having made nothing.
 */
static char *new_changeset(struct launch *l, int argc, char **argv, int cmd)
{
	char path[4200], num[24], created[40], *cfg, *meta = 0, *q, *mend;
	size_t need;
	long fd, ts[2], r;
	int tries;
	u8 rnd[6];
	l->lockfd = -1;
	for (tries = 0; tries < 4; tries++) {
		if (sys3(__NR_getrandom, rnd, sizeof rnd, 0) != (long)sizeof rnd)
			return 0;
		for (int i = 0; i < 6; i++) {
			l->id[2 * i] = "0123456789abcdef"[rnd[i] >> 4];
			l->id[2 * i + 1] = "0123456789abcdef"[rnd[i] & 15];
		}
		l->id[CHANGESET_ID_LEN] = 0;
		l->csdir[0] = 0;
		if (scat(l->csdir, sizeof l->csdir, l->store) < 0 || scat(l->csdir, sizeof l->csdir, "/changesets/") < 0 ||
		    scat(l->csdir, sizeof l->csdir, l->id) < 0)
			return 0;
		r = sys3(__NR_mkdirat, AT_FDCWD, l->csdir, 0700);
		if (r == 0)
			break;
		l->csdir[0] = 0;
		if (r != -EEXIST)
			return 0;
	}
	if (!l->csdir[0])
		return 0;
	/* r0, r0/upper, r0/work (no table of strings: the blob has no relocations) */
	for (int i = 0; i < 3; i++) {
		path[0] = 0;
		if (scat(path, sizeof path, l->csdir) < 0 || scat(path, sizeof path, "/r0") < 0 ||
		    (i == 1 && scat(path, sizeof path, "/upper") < 0) || (i == 2 && scat(path, sizeof path, "/work") < 0) ||
		    sys3(__NR_mkdirat, AT_FDCWD, path, 0700) < 0 ||
		    sys5(__NR_fchownat, AT_FDCWD, path, l->uid, l->gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    (i == 1 && sys3(__NR_fchmodat, AT_FDCWD, path, l->upmode | 0700) < 0))
			goto fail;
	}
	/* The lock, passed on to the waiter and to pinfold __finish after it. */
	path[0] = 0;
	scat(path, sizeof path, l->csdir);
	scat(path, sizeof path, "/lock");
	l->lockfd = sys4(__NR_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (l->lockfd < 0 || sys2(__NR_flock, l->lockfd, LOCK_EX | LOCK_NB) < 0)
		goto fail;
	utoa(num, (unsigned long)sys0(__NR_getpid));
	scat(num, sizeof num, "\n");
	sys3(__NR_write, l->lockfd, num, slen(num));
	/* meta.json as changeset.ReplayMeta defines it: this head, then the tail
	 * the recorded run took from changeset.ReplayTail. */
	sys2(__NR_clock_gettime, CLOCK_REALTIME, ts);
	rfc3339(created, ts[0], ts[1]);
	need = 128 + slen(l->metatail) + slen(l->id) + slen(created);
	for (int i = cmd; i < argc; i++)
		need += 6 * slen(argv[i]) + 4;
	if (need > LAUNCH_MAX_MESSAGE || !(meta = map_anon(need)))
		goto fail;
	q = meta, mend = meta + need;
#define PUTS(lit) put(&q, mend, lit, sizeof lit - 1)
	r = PUTS("{\n  \"id\": \"") | put(&q, mend, l->id, CHANGESET_ID_LEN) | PUTS("\",\n  \"created\": \"") |
	    put(&q, mend, created, slen(created)) | PUTS("\",\n  \"command\": [");
	for (int i = cmd; i < argc && r == 0; i++)
		r = (i > cmd ? put(&q, mend, ",", 1) : 0) | jsonstr(&q, mend, argv[i]);
	r |= PUTS("]") | put(&q, mend, l->metatail, slen(l->metatail));
#undef PUTS
	if (r < 0)
		goto fail;
	path[0] = 0;
	scat(path, sizeof path, l->csdir);
	scat(path, sizeof path, "/meta.json.tmp");
	fd = sys4(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	r = sys3(__NR_write, fd, meta, (size_t)(q - meta));
	sys1(__NR_close, fd);
	{
		char dst[4200];
		dst[0] = 0;
		scat(dst, sizeof dst, l->csdir);
		scat(dst, sizeof dst, "/meta.json");
		if (r != q - meta || sys2(__NR_rename, path, dst) < 0)
			goto fail;
	}
	sys2(__NR_munmap, meta, need);
	meta = 0;
	/* The config with the new id where the recorded one stood. */
	if (!(cfg = map_anon(l->config_len)))
		goto fail;
	memcpy(cfg, l->config, l->config_len);
	for (u32 i = 0; i < l->nids; i++)
		memcpy(cfg + l->idoffs[i], l->id, CHANGESET_ID_LEN);
	return cfg;
fail:
	if (meta)
		sys2(__NR_munmap, meta, need);
	drop_changeset(l);
	return 0;
}

/*
 * command returns the M_EXEC message for argv[cmd:]: the recorded one when
 * its arguments are the same, or (LAUNCH_ANY_COMMAND) the recorded one
 * with the arguments replaced. 0 when neither applies.
 */
static char *command(struct launch *l, int argc, char **argv, int cmd, size_t *len)
{
	const char *p = l->exec + 8, *end = l->exec + l->exec_len, *rest;
	char *m, *q, *mend;
	size_t need = 8;
	int i = cmd, same = 1;
	u32 hdr[2];
	if (l->exec_len < 8)
		return 0;
	/* The recorded arguments come first. */
	while (end - p >= 8) {
		u16 tag;
		u32 rl;
		memcpy(&tag, p, 2);
		memcpy(&rl, p + 4, 4);
		if (tag != E_ARG)
			break;
		if ((u64)rl > (u64)(end - p - 8))
			return 0;
		if (i >= argc || rl != slen(argv[i]) + 1 || memcmp(p + 8, argv[i], rl))
			same = 0;
		i++;
		p += 8 + ((rl + 3) & ~3u);
	}
	if (p > end)
		return 0;
	rest = p;
	if (same && i == argc) {
		*len = l->exec_len;
		return (char *)l->exec;
	}
	if (!(l->flags & LAUNCH_ANY_COMMAND) || cmd >= argc)
		return 0;
	for (i = cmd; i < argc; i++)
		need += 8 + ((slen(argv[i]) + 1 + 3) & ~3u);
	need += (size_t)(end - rest);
	if (need > LAUNCH_MAX_MESSAGE || !(m = map_anon(need)))
		return 0;
	q = m + 8, mend = m + need;
	for (i = cmd; i < argc; i++) {
		u32 h[2] = {E_ARG, (u32)slen(argv[i]) + 1};
		put(&q, mend, h, 8);
		put(&q, mend, argv[i], h[1]);
		while ((q - m) % 4)
			*q++ = 0;
	}
	put(&q, mend, rest, (size_t)(end - rest));
	hdr[0] = M_EXEC, hdr[1] = (u32)(need - 8);
	memcpy(m, hdr, 8);
	*len = need;
	return m;
}

/* ---- the shared network helper (R_NET), as netpolicy's client ---- */

#define SOCK_NONBLOCK 04000
#define F_GETFL 3
#define F_SETFL 4
#define POLLIN 1

struct pollfd_ {
	int fd;
	short events, revents;
};

/*
 * net_connect connects to the shared helper and sends the recorded
 * configuration, without waiting for the helper's greeting (net_hello
 * reads it while the init builds the sandbox). -1 when there is none to
 * take the run (it exited when idle): the Go side then starts over.
 */
static long net_connect(struct launch *l)
{
	struct {
		u16 family;
		char path[108];
	} sa;
	size_t n = slen(l->netsock);
	long fd, fl;
	if (n >= sizeof sa.path)
		return -1;
	fd = sys3(__NR_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.family = AF_UNIX;
	memcpy(sa.path, l->netsock, n + 1);
	if (sys3(__NR_connect, fd, &sa, 2 + n + 1) < 0 || (fl = sys2(__NR_fcntl, fd, F_GETFL)) < 0 ||
	    sys3(__NR_fcntl, fd, F_SETFL, fl & ~SOCK_NONBLOCK) < 0 ||
	    sys3(__NR_write, fd, l->netcfg, l->netcfg_len) != (long)l->netcfg_len) {
		sys1(__NR_close, fd);
		return -1;
	}
	return fd;
}

/*
 * net_hello waits (at most 3 s, as the Go side waits: netpolicy
 * launchShared) for the shared helper's greeting, which says that it took
 * the run (one whose queue is full answers with an error instead). -1
 * otherwise: the command must not start, and the Go side starts over.
 */
static long net_hello(struct launch *l)
{
	char b[256];
	long r, ts[2] = {3, 0};
	struct pollfd_ p;
	p.fd = (int)l->netfd, p.events = POLLIN, p.revents = 0;
	if (sys5(__NR_ppoll, &p, 1, ts, 0, 8) != 1 || (r = sys3(__NR_read, l->netfd, b, sizeof b - 1)) <= 0)
		return -1;
	b[r] = 0;
	for (long i = 0; i + 8 <= r; i++)
		if (!memcmp(b + i, "\"hello\"", 7) && b[i + 7] == ':')
			return 0;
	return -1;
}

/*
 * net_report hands the run off to the helper (netpolicy.Report): its
 * stderr, and the run's violation log, named as the Go side names it
 * (<runs>/<UTC time>-<pid>/violations.jsonl).
 */
static long net_report(struct launch *l)
{
	char msg[4400], t[40], stamp[40], num[24], *q = msg, *mend = msg + sizeof msg;
	long ts[2], r;
	int two = 2;
	sys2(__NR_clock_gettime, CLOCK_REALTIME, ts);
	rfc3339(t, ts[0], ts[1]);
	/* 2006-01-02T15:04:05.999999999Z -> 20060102T150405.999999 */
	{
		int j = 0;
		for (int i = 0; i < 26; i++)
			if (t[i] != '-' && t[i] != ':')
				stamp[j++] = t[i];
		stamp[j] = 0;
	}
	utoa(num, (unsigned long)sys0(__NR_getpid));
	{
		char path[4200];
		path[0] = 0;
		if (scat(path, sizeof path, l->netruns) < 0 || scat(path, sizeof path, "/") < 0 ||
		    scat(path, sizeof path, stamp) < 0 || scat(path, sizeof path, "-") < 0 ||
		    scat(path, sizeof path, num) < 0 || scat(path, sizeof path, "/violations.jsonl") < 0)
			return -1;
		static const char head[] = "{\"report\":{\"log\":";
		r = put(&q, mend, head, sizeof head - 1) | jsonstr(&q, mend, path) | put(&q, mend, "}}", 2);
	}
	if (r < 0)
		return -1;
	return send_fds((int)l->netfd, msg, (size_t)(q - msg), &two, 1);
}

/* ---- the run's cgroups (R_CGROUP), as cgroup.System.New makes them ---- */

#define EBUSY 16

/* cg_name writes "<pid>-<start time>-1": the Go side's name for a group of
 * this process (sandbox/native: instancePrefix), which pinfold clean reads. */
static int cg_name(char *d, size_t cap)
{
	char b[1024], num[24];
	long fd = sys3(__NR_open, "/proc/self/stat", O_RDONLY | O_CLOEXEC, 0), n;
	const char *p = 0, *end;
	int field = 2;
	size_t len;
	if (fd < 0)
		return -1;
	n = sys3(__NR_read, fd, b, sizeof b - 1);
	sys1(__NR_close, fd);
	if (n <= 0)
		return -1;
	b[n] = 0;
	for (long i = 0; i < n; i++)
		if (b[i] == ')')
			p = b + i + 1;
	if (!p)
		return -1;
	/* Fields after the command's: " S ppid ...", the start time is the 22nd. */
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	for (end = p; *end >= '0' && *end <= '9'; end++)
		;
	if (end == p || end - p > 20)
		return -1;
	d[0] = 0;
	utoa(num, (unsigned long)sys0(__NR_getpid));
	if (scat(d, cap, num) < 0 || scat(d, cap, "-") < 0 || (len = slen(d)) + (size_t)(end - p) + 3 > cap)
		return -1;
	memcpy(d + len, p, (size_t)(end - p));
	d[len + (size_t)(end - p)] = 0;
	return scat(d, cap, "-1");
}

/* cg_path writes the group's directory I (a digit) joined with file. */
static int cg_path(struct launch *l, char *d, size_t cap, char i, const char *file)
{
	if (i < '0' || i - '0' >= l->ncg)
		return -1;
	d[0] = 0;
	return scat(d, cap, l->cgdir[i - '0']) | scat(d, cap, "/") | scat(d, cap, file);
}

static long cg_write(const char *path, const char *v)
{
	long fd = sys4(__NR_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0), r;
	size_t n = slen(v);
	if (fd < 0)
		return fd;
	do
		r = sys3(__NR_write, fd, v, n);
	while (r == -EINTR);
	sys1(__NR_close, fd);
	return r < 0 ? r : (size_t)r == n ? 0 : -EINVAL;
}

/*
 * cg_make makes the record's groups and writes their limits, as the Go
 * side's cgroup.System.New does, and notes the waiter's event files. -1
 * on any failure (cg_remove then removes what it made): the command must
 * not run without its limits, so the Go side starts over, and fails as it
 * would have.
 */
static int cg_make(struct launch *l)
{
	char name[64], path[600];
	const char *p = l->cg, *end = l->cg + l->cg_len;
	if (cg_name(name, sizeof name) < 0)
		return -1;
	while (p < end) {
		const char *e = p, *a = p + slen(p) + 1, *b = a < end ? a + slen(a) + 1 : end;
		long r;
		switch (*e) {
		case 'd':
			if (l->ncg == LAUNCH_MAX_CGROUPS)
				return -1;
			l->cgdir[l->ncg][0] = 0;
			if (scat(l->cgdir[l->ncg], sizeof l->cgdir[0], e + 1) < 0 ||
			    scat(l->cgdir[l->ncg], sizeof l->cgdir[0], "/") < 0 ||
			    scat(l->cgdir[l->ncg], sizeof l->cgdir[0], name) < 0)
				return -1;
			/* A missing parent is the Go side's to make (and on v2 to
			 * enable controllers in): it then records again. */
			if (sys3(__NR_mkdirat, AT_FDCWD, l->cgdir[l->ncg], 0755) < 0)
				return -1;
			l->ncg++;
			if (cg_path(l, path, sizeof path, (char)('0' + l->ncg - 1), "tasks") < 0)
				return -1;
			if ((l->cgv1[l->ncg - 1] = sys4(__NR_faccessat, AT_FDCWD, path, 0, 0) == 0))
				l->nself++;
			p = a;
			break;
		case 'w':
		case 'o':
			if (a >= end || cg_path(l, path, sizeof path, e[1], e + 2) < 0)
				return -1;
			r = cg_write(path, a);
			if (r < 0 && !(*e == 'o' && r == -ENOENT))
				return -1;
			p = b;
			break;
		case 'm':
			if (b >= end || cg_path(l, l->memev, sizeof l->memev, e[1], e + 2) < 0)
				return -1;
			l->oommsg = a, l->memmsg = b;
			p = b + slen(b) + 1;
			break;
		case 'p':
			if (a >= end || cg_path(l, l->pidsev, sizeof l->pidsev, e[1], e + 2) < 0)
				return -1;
			l->pidsmsg = a;
			p = b;
			break;
		default:
			return -1;
		}
	}
	return l->ncg > 0 ? 0 : -1;
}

/*
 * cg_spawn returns the M_SPAWN message with a C_CGSELF record for each
 * cgroup v1 group: stage 1 moves itself into them before it clones stage
 * 2, which is born there. The launcher writing stage 2's pid into
 * cgroup.procs would wait for an RCU grace period (the cgroup threadgroup
 * lock's writer): 8 to 30 ms on a busy host, several times the whole
 * start. 0 when the message cannot be made.
 */
static char *cg_spawn(struct launch *l, size_t *len)
{
	size_t need = l->spawn_len;
	char *m, *q;
	u32 size;
	for (int i = 0; i < l->ncg; i++)
		if (l->cgv1[i])
			need += 8 + ((slen(l->cgdir[i]) + sizeof "/tasks" + 3) & ~3u);
	if (need > LAUNCH_MAX_MESSAGE || !(m = map_anon(need)))
		return 0;
	memcpy(m, l->spawn, l->spawn_len);
	q = m + l->spawn_len;
	for (int i = 0; i < l->ncg; i++) {
		u32 h[2] = {C_CGSELF, (u32)(slen(l->cgdir[i]) + sizeof "/tasks")};
		if (!l->cgv1[i])
			continue;
		memcpy(q, h, 8);
		memcpy(q + 8, l->cgdir[i], slen(l->cgdir[i]));
		memcpy(q + 8 + slen(l->cgdir[i]), "/tasks", sizeof "/tasks");
		q += 8 + ((h[1] + 3) & ~3u);
	}
	size = (u32)(need - 8);
	memcpy(m + 4, &size, 4);
	*len = need;
	return m;
}

/* cg_join moves pid into every group that stage 1 does not move itself
 * into (cgroup v2): one write to cgroup.procs each. */
static int cg_join(struct launch *l, long pid)
{
	char path[300], num[24];
	utoa(num, (unsigned long)pid);
	for (int i = 0; i < l->ncg; i++) {
		if (l->cgv1[i])
			continue;
		path[0] = 0;
		if (scat(path, sizeof path, l->cgdir[i]) < 0 || scat(path, sizeof path, "/cgroup.procs") < 0 ||
		    cg_write(path, num) < 0)
			return -1;
	}
	return 0;
}

/* cg_remove removes the groups (their processes gone), last first, retrying
 * a group whose processes are still leaving for about a second. */
static void cg_remove(struct launch *l)
{
	for (int i = l->ncg - 1; i >= 0; i--) {
		long ts[2] = {0, 100000};
		for (int round = 0; round < 100; round++) {
			long r = sys3(__NR_unlinkat, AT_FDCWD, l->cgdir[i], AT_REMOVEDIR);
			if (r != -EBUSY && r != -EINTR)
				break;
			sys2(__NR_nanosleep, ts, 0);
			if (ts[1] < 10000000)
				ts[1] *= 2;
		}
	}
	l->ncg = 0;
}

struct child {
	const char *exe;
	int sock;
};

/* child_main runs in the vfork child: the init with the socket as fd 0. */
static int child_main(void *arg)
{
	struct child *c = arg;
	char *argv[] = {"pinfold-init", 0}, *envp[] = {0};
	if (sys2(__NR_dup2, c->sock, 0) < 0)
		return 127;
	/* The init gets the socket only, as from Go's ForkExec. */
	sys1(__NR_close, 1);
	sys1(__NR_close, 2);
	sys2(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL);
	sys3(__NR_execve, c->exe, argv, envp);
	return 127;
}

static long recv_type(int sock, char *buf, size_t cap, u32 *type)
{
	long n = recv_fds(sock, buf, cap, 0, 0, 0);
	if (n >= 8)
		memcpy(type, buf, 4);
	return n;
}

/* fdpath writes /proc/self/fd/N. */
static void fdpath(char *d, long fd)
{
	char num[24];
	d[0] = 0;
	scat(d, 40, "/proc/self/fd/");
	utoa(num, (unsigned long)fd);
	scat(d, 40, num);
}

/* init_memfd returns a sealed memfd holding the init, or -1. */
static long init_memfd(const struct goslice *init)
{
	const char *mname = "pinfold-init";
	long memfd, n;
	memfd = sys2(__NR_memfd_create, mname, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
	if (memfd == -EINVAL)
		memfd = sys2(__NR_memfd_create, mname, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0)
		return -1;
	for (long off = 0; off < init->n; off += n)
		if ((n = sys3(__NR_write, memfd, init->p + off, init->n - off)) <= 0)
			goto fail;
	if (sys3(__NR_fcntl, memfd, F_ADD_SEALS, SEALS) < 0)
		goto fail;
	return memfd;
fail:
	sys1(__NR_close, memfd);
	return -1;
}

/*
 * launch starts the sandbox from the record and becomes the waiter. It
 * returns only when something failed before the command ran, having
 * undone everything: the Go side then starts over and reports the error.
 */
static void launch(struct launch *l, const struct goslice *init, const char *exec, size_t exec_len, char **envp)
{
	char exe[40], buf[512], child_stack[8192];
	char sockstr[24], pidstr[24], deadstr[24];
	char *wargv[40], *wenv[] = {0}, **wenvp = wenv, **wa;
	char netstr[24];
	int sv[2], stdio[3] = {-1, 1, 2};
	long memfd, stage1, stage2 = 0, n;
	u64 deadline = 0;
	u32 type = 0;
	struct child c;

	if ((memfd = init_memfd(init)) < 0)
		return;
	fdpath(exe, memfd);
	if (sys4(__NR_socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		goto close_memfd;
	/* The run's cgroups are made, and their limits set, before the init
	 * starts: it starts the sandbox in them. */
	if (l->cg) {
		size_t slen_ = 0;
		char *sm;
		if (cg_make(l) < 0 || !(sm = cg_spawn(l, &slen_))) {
			cg_remove(l);
			goto close_socks;
		}
		n = send_fds(sv[0], sm, slen_, 0, 0);
		sys2(__NR_munmap, sm, slen_);
		if (n < 0) {
			cg_remove(l);
			goto close_socks;
		}
	} else if (send_fds(sv[0], l->spawn, l->spawn_len, 0, 0) < 0) /* queued before the init exists */
		goto close_socks;
	c.exe = exe, c.sock = sv[1];
	stage1 = pf_clone(CLONE_VM | CLONE_VFORK | SIGCHLD, child_stack + sizeof child_stack, child_main, &c);
	sys1(__NR_close, sv[1]);
	sv[1] = -1;
	if (stage1 < 0)
		goto kill; /* no process, but the cgroups made above */
	if (recv_type(sv[0], buf, sizeof buf, &type) < 12 || type != M_PID)
		goto kill;
	memcpy(&stage2, buf + 8, 4);
	stage2 = (int)stage2;
	if (send_fds(sv[0], l->config, l->config_len, 0, 0) < 0)
		goto kill;
	/*
	 * Stage 2 was born in the v1 groups. Stage 1, in them too until it
	 * exits once it has the config, is reaped before the command starts,
	 * so that it takes none of the command's pids. The v2 groups are
	 * joined while the init builds the root. The init forks the command
	 * only once it has M_EXEC, sent below, after every join succeeded:
	 * the command never runs outside its groups.
	 */
	if (l->cg) {
		if (l->nself && sys4(__NR_wait4, stage1, 0, WALL, 0) == stage1)
			stage1 = 0;
		if (cg_join(l, stage2) < 0)
			goto kill;
	}
	/* The helper's greeting, read only now: its wake-up overlaps the
	 * init's. The command starts only once the helper took the run. */
	if (l->netfd >= 0 && net_hello(l) < 0)
		goto kill;
	if (!(l->flags & LAUNCH_STDIN)) {
		stdio[0] = (int)sys3(__NR_open, "/dev/null", O_RDWR | O_CLOEXEC, 0);
		if (stdio[0] < 0)
			goto kill;
	} else {
		stdio[0] = 0;
	}
	n = send_fds(sv[0], exec, exec_len, stdio, 3);
	if (stdio[0] > 2)
		sys1(__NR_close, stdio[0]);
	if (n < 0)
		goto kill;
	for (;;) {
		int tun = -1, nf = 0;
		n = recv_fds(sv[0], buf, sizeof buf, &tun, 1, &nf);
		if (n < 8)
			goto kill;
		memcpy(&type, buf, 4);
		if (type == M_TUN && nf == 1) {
			/* The sandbox's device, for the helper to serve. */
			n = l->netfd >= 0 ? send_fds((int)l->netfd, "{\"tun\":true}", 12, &tun, 1) : -1;
			sys1(__NR_close, tun);
			if (n < 0)
				goto kill;
			continue;
		}
		if (nf > 0)
			sys1(__NR_close, tun);
		if (type == M_STARTED)
			break;
		if (type != M_READY)
			goto kill; /* M_ERROR: the Go side explains it */
	}

	if (l->timeout) {
		long ts[2];
		sys2(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, ts);
		deadline = (u64)ts[0] * 1000000000ULL + (u64)ts[1] + l->timeout;
	}
	utoa(sockstr, (unsigned long)sv[0]);
	utoa(pidstr, (unsigned long)stage2);
	utoa(deadstr, deadline);
	wargv[0] = "pinfold-wait", wargv[1] = sockstr, wargv[2] = pidstr, wargv[3] = deadstr;
	wargv[4] = (char *)l->waitmsg;
	wargv[5] = (char *)l->waitmsg + slen(l->waitmsg) + 1;
	wa = wargv + 6;
	if (l->netfd >= 0) {
		/* The helper reports what it blocked; the waiter waits for it. */
		if (net_report(l) < 0 || sys3(__NR_fcntl, l->netfd, F_SETFD, 0) < 0)
			goto kill;
		utoa(netstr, (unsigned long)l->netfd);
		*wa++ = "-n", *wa++ = netstr;
	}
	if (l->ncg) {
		/* The waiter reports the limits hit and removes the groups. */
		if (l->memev[0])
			*wa++ = "-m", *wa++ = l->memev, *wa++ = (char *)l->oommsg, *wa++ = (char *)l->memmsg;
		if (l->pidsev[0])
			*wa++ = "-p", *wa++ = l->pidsev, *wa++ = (char *)l->pidsmsg;
		for (int i = 0; i < l->ncg; i++)
			*wa++ = "-g", *wa++ = l->cgdir[i];
	}
	*wa = 0;
	if (l->csdir[0]) {
		/* The waiter finishes the changeset, holding its lock. */
		wenvp = envp;
		if (sys3(__NR_fcntl, l->lockfd, F_SETFD, 0) == 0)
			wa[0] = (char *)l->exe, wa[1] = (char *)l->store, wa[2] = l->id, wa[3] = 0;
	}
	if (sys3(__NR_fcntl, sv[0], F_SETFD, 0) == 0)
		sys3(__NR_execve, exe, wargv, wenvp);
	/* The command runs and the waiter cannot: end it, and say why. */
	sys2(__NR_kill, stage2, SIGKILL);
	sys4(__NR_wait4, stage2, 0, WALL, 0);
	cg_remove(l);
	{
		static const char msg[] = "pinfold: the command was killed: the waiter could not be started\n"
					  "  Fix: run it again with PINFOLD_NO_LAUNCH_CACHE=1\n";
		sys3(__NR_write, 2, msg, sizeof msg - 1);
	}
	die(125);

kill:
	if (stage2 > 0)
		sys2(__NR_kill, stage2, SIGKILL);
	if (stage1 > 0) {
		sys2(__NR_kill, stage1, SIGKILL);
		sys4(__NR_wait4, stage1, 0, WALL, 0);
	}
	if (stage2 > 0)
		sys4(__NR_wait4, stage2, 0, WALL, 0);
	cg_remove(l);
close_socks:
	sys1(__NR_close, sv[0]);
	if (sv[1] >= 0)
		sys1(__NR_close, sv[1]);
close_memfd:
	sys1(__NR_close, memfd);
}

/*
 * The pre-spawned init of a first run, handed to the Go side (launch.go:
 * prespawned). The launcher writes it before the Go runtime starts; every
 * field is zero when there is none.
 */
struct prespawn {
	long sock;   /* the init's socket, CLOEXEC */
	long stage1; /* the init's first stage, this process's child */
	long memfd;  /* the sealed memfd it was executed from, CLOEXEC */
	const char *msg; /* the messages sent (M_SPAWN, then M_CONFIG if any), in their own mapping */
	long len;
	long maxprocs; /* 1: the launcher gave the runtime GOMAXPROCS=1 (with_maxprocs) */
};

#define MSG_DONTWAIT 0x40

/* read_hint reads a hint file into a fresh mapping: trusted like a record
 * (a regular file of ours that nobody else may write), 8 to max bytes. */
static char *read_hint(const char *path, long max, long *size)
{
	struct kstat st;
	char *msg;
	long fd = sys3(__NR_open, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (sys2(__NR_fstat, fd, &st) < 0 || (st.mode & S_IFMT) != S_IFREG || st.uid != (u32)sys0(__NR_geteuid) ||
	    (st.mode & 022) || st.size < 8 || st.size > max) {
		sys1(__NR_close, fd);
		return 0;
	}
	if (!(msg = map_anon((size_t)st.size)) || sys3(__NR_read, fd, msg, st.size) != st.size) {
		sys1(__NR_close, fd);
		if (msg)
			sys2(__NR_munmap, msg, st.size);
		return 0;
	}
	sys1(__NR_close, fd);
	*size = st.size;
	return msg;
}

/* msg_len is the length of the message of type t at the start of m (n
 * bytes), or 0 if there is none. */
static long msg_len(const char *m, long n, u32 t)
{
	u32 hdr[2];
	if (n < 8)
		return 0;
	memcpy(hdr, m, 8);
	return hdr[0] == t && (long)hdr[1] <= n - 8 ? 8 + (long)hdr[1] : 0;
}

/*
 * pre_spawn starts a first run's init before the Go runtime does, from a
 * hint (trusted like a record), and returns without waiting. The hint is
 * the command line's config hint (<store>/hints/HASH, cfg naming it:
 * the M_SPAWN and M_CONFIG messages of the last run of these flags in
 * this directory, for a root that names nothing of one run's) or else
 * the store's spawn hint (<store>/spawn-hint, the last first run's
 * M_SPAWN); a traced run's have a ".trace" suffix (its M_SPAWN differs). The init makes the
 * namespaces and id maps meanwhile, and with a config builds the root
 * too; then it waits for M_EXEC. It runs nothing. The Go side adopts it
 * only if the messages are the ones it would have sent, and kills it
 * otherwise; it dies with this process (its parent-death signal, its
 * socket's end of file). A failure leaves out zero, and the Go side
 * spawns as before.
 */
static void pre_spawn(char *dir, size_t cap, const struct goslice *init, struct prespawn *out, int trace,
		      const char *cfg)
{
	char exe[40], child_stack[8192], *msg = 0;
	struct child c;
	int sv[2];
	long memfd, pid, size = 0, first = 0;
	size_t dlen = slen(dir);

	if (!out)
		return;
	if (cfg && scat(dir, cap, "/hints/") == 0 && scat(dir, cap, cfg) == 0 &&
	    scat(dir, cap, trace ? ".trace" : "") == 0 &&
	    (msg = read_hint(dir, LAUNCH_MAX_SPAWN + LAUNCH_MAX_CONFIG_HINT, &size)) != 0) {
		/* Exactly one M_SPAWN, then one M_CONFIG. */
		first = msg_len(msg, size, M_SPAWN);
		if (!first || first > LAUNCH_MAX_SPAWN || msg_len(msg + first, size - first, M_CONFIG) != size - first) {
			sys2(__NR_munmap, msg, size);
			msg = 0;
		}
	}
	dir[dlen] = 0;
	if (!msg) {
		if (scat(dir, cap, trace ? "/spawn-hint.trace" : "/spawn-hint") < 0 ||
		    !(msg = read_hint(dir, LAUNCH_MAX_SPAWN, &size)))
			return;
		if ((first = msg_len(msg, size, M_SPAWN)) != size)
			goto unmap;
	}
	if ((memfd = init_memfd(init)) < 0)
		goto unmap;
	fdpath(exe, memfd);
	if (sys4(__NR_socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		goto close_memfd;
	/* Queued before the init exists; the config without blocking (a
	 * socket buffer too small for it: sent without it, the Go side sends
	 * its own). */
	if (send_fds(sv[0], msg, (size_t)first, 0, 0) < 0)
		goto close_socks;
	if (size > first) {
		struct iovec iov = {msg + first, (size_t)(size - first)};
		struct msghdr m;
		memset(&m, 0, sizeof m);
		m.iov = &iov;
		m.iovlen = 1;
		if (sys3(__NR_sendmsg, sv[0], &m, MSG_NOSIGNAL | MSG_DONTWAIT) != size - first)
			size = first;
	}
	c.exe = exe, c.sock = sv[1];
	pid = pf_clone(CLONE_VM | CLONE_VFORK | SIGCHLD, child_stack + sizeof child_stack, child_main, &c);
	sys1(__NR_close, sv[1]);
	if (pid < 0) {
		sys1(__NR_close, sv[0]);
		goto close_memfd;
	}
	out->sock = sv[0], out->stage1 = pid, out->memfd = memfd, out->msg = msg, out->len = size;
	return;
close_socks:
	sys1(__NR_close, sv[0]);
	sys1(__NR_close, sv[1]);
close_memfd:
	sys1(__NR_close, memfd);
unmap:
	sys2(__NR_munmap, msg, size);
}

/*
 * limit_flag: a run given limits on its command line, whose spawn names
 * cgroups of its own and never matches a hint: not worth an init. (Limits
 * from a config file are found by the Go side, which discards it.)
 */
static int limit_flag(const char *a)
{
	/* -m is --memory's short form, alone or in a group (-im): a short
	 * group with an m anywhere counts (a miss costs only the init). */
	if (a[0] == '-' && a[1] && a[1] != '-')
		for (const char *c = a + 1; *c; c++)
			if (*c == 'm')
				return 1;
	/* One string, no table of pointers: the blob has no relocations. */
	for (const char *f = "--memory\0--pids\0--cpus\0--disk\0"; *f; f += slen(f) + 1) {
		size_t i = 0;
		while (f[i] && a[i] == f[i])
			i++;
		if (!f[i] && (a[i] == 0 || a[i] == '='))
			return 1;
	}
	return 0;
}

/* pinfold exec's fast path (fast_exec). */
#include "fastexec.c"

/* The room entry_amd64.s leaves below the initial stack (ENV_ROOM there). */
#define ENV_ROOM 16384

/*
 * with_maxprocs returns a copy of the initial stack (argc, argv, envp,
 * auxv) in room with GOMAXPROCS=1 added to the environment, for the Go
 * runtime to start from, or sp when it has the variable already or the
 * copy does not fit. The Go side runs on one P (cmd/pinfold's main):
 * set from the start, the runtime starts no thread for a second P, and
 * main's runtime.GOMAXPROCS(1) stops no world to flush its caches. The
 * Go side takes it out of its environment before anything reads it
 * (pre->maxprocs), so no program it starts inherits it.
 */
static long *with_maxprocs(long *sp, long *room, struct prespawn *pre)
{
	long argc = sp[0], n = 0, i, *d = room, *aux;
	char **envp = (char **)(sp + 1) + argc + 1, **e = envp;
	for (; *e; e++)
		if (!memcmp(*e, "GOMAXPROCS=", 11))
			return sp;
	aux = (long *)(e + 1);
	while (aux[n] != 0) /* AT_NULL ends the pairs */
		n += 2;
	n += 2;
	if (!pre || !room || (u64)(1 + argc + 1 + (e - envp) + 2 + n) * 8 > ENV_ROOM)
		return sp;
	*d++ = argc;
	for (i = 0; i <= argc; i++) /* with argv's NULL */
		*d++ = sp[1 + i];
	for (e = envp; *e; e++)
		*d++ = (long)*e;
	*d++ = (long)"GOMAXPROCS=1";
	*d++ = 0;
	for (i = 0; i < n; i++)
		*d++ = aux[i];
	pre->maxprocs = 1;
	return room;
}

/*
 * pf_launch is called with the process's initial stack (argc, argv, envp),
 * the embedded init, where a first run's pre-spawned init is handed over
 * and ENV_ROOM bytes of room below the stack. It returns when the Go side
 * must run, with the stack the runtime starts from: sp, or a copy of it
 * in room (with_maxprocs).
 */
__attribute__((section(".text.launch_entry"))) long *pf_launch(long *sp, const struct goslice *init,
								 struct prespawn *pre, long *room)
{
	int argc = (int)sp[0], cmd;
	char **argv = (char **)(sp + 1), **envp = argv + argc + 1;
	char dir[4096], hex[17], cfghex[17], *k, *exec, *rec;
	size_t klen = 0, kmap = 0, khead = 0, exec_len = 0, dlen;
	int limits = 0;
	long fd;
	struct kstat st;
	struct launch l;
	u64 h;

	if (argc >= 4 && streq(argv[1], "exec") && !getenv_(envp, "PINFOLD_NO_LAUNCH_CACHE")) {
		fast_exec(argc, argv, envp);
		return sp;
	}
	if (argc < 4 || !streq(argv[1], "run") || getenv_(envp, "PINFOLD_NO_LAUNCH_CACHE") || init->n <= 0)
		return sp;
	/*
	 * A closed 0, 1 or 2 would be taken by our own descriptors and passed
	 * on as the command's; the Go runtime opens /dev/null there first.
	 */
	for (int i = 0; i < 3; i++)
		if (sys2(__NR_fcntl, i, F_GETFD) < 0)
			return sp;
	/* The command follows the first "--"; the Go side records no run without one. */
	for (cmd = 2; cmd < argc && !streq(argv[cmd], "--"); cmd++)
		if (limit_flag(argv[cmd]))
			limits = 1;
	if (++cmd >= argc)
		return sp;
	if (storedir(dir, sizeof dir, envp) < 0 || !(k = key(argc, argv, cmd, envp, &klen, &kmap, &khead)))
		return sp;
	/* The store is trusted as the Go side trusts it (store.Open): a
	 * directory of ours that nobody else may write. */
	if (sys2(__NR_stat, dir, &st) < 0 || (st.mode & S_IFMT) != S_IFDIR || st.uid != (u32)sys0(__NR_geteuid) ||
	    (st.mode & 022))
		goto unmap_key;
	dlen = slen(dir);
	h = fnv1a(FNV_BASIS, k, klen);
	for (int i = 15; i >= 0; i--, h >>= 4)
		hex[i] = "0123456789abcdef"[h & 15];
	hex[16] = 0;
	h = fnv1a(FNV_BASIS, k, khead);
	for (int i = 15; i >= 0; i--, h >>= 4)
		cfghex[i] = "0123456789abcdef"[h & 15];
	cfghex[16] = 0;
	if (scat(dir, sizeof dir, "/launch/") < 0 || scat(dir, sizeof dir, hex) < 0)
		goto first;
	fd = sys3(__NR_open, dir, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		goto first;
	/* Trusted like the store itself: ours, and writable by nobody else. */
	if (sys2(__NR_fstat, fd, &st) < 0 || (st.mode & S_IFMT) != S_IFREG || st.uid != (u32)sys0(__NR_geteuid) ||
	    (st.mode & 022) || st.size < 16 || st.size > LAUNCH_MAX_RECORD) {
		sys1(__NR_close, fd);
		goto first;
	}
	/* Read, not mapped: a file truncated under a mapping raises SIGBUS. */
	if (!(rec = map_anon((size_t)st.size)) || sys3(__NR_read, fd, rec, st.size) != st.size) {
		sys1(__NR_close, fd);
		if (rec)
			sys2(__NR_munmap, rec, st.size);
		goto first;
	}
	sys1(__NR_close, fd);
	memset(&l, 0, sizeof l);
	if (check(rec, (size_t)st.size, k, klen, &l) &&
	    (exec = command(&l, argc, argv, cmd, &exec_len)) != 0) {
		char *cfg = 0;
		l.netfd = l.netsock ? net_connect(&l) : -1;
		if ((!l.netsock || l.netfd >= 0) && (!l.nids || (cfg = new_changeset(&l, argc, argv, cmd)) != 0)) {
			if (cfg)
				l.config = cfg;
			launch(&l, init, exec, exec_len, envp);
			drop_changeset(&l);
			if (cfg)
				sys2(__NR_munmap, cfg, l.config_len);
		}
		if (l.netfd >= 0)
			sys1(__NR_close, l.netfd);
		if (exec != l.exec)
			sys2(__NR_munmap, exec, exec_len);
	}
	sys2(__NR_munmap, rec, st.size);
first:
	/* Not replayed: the Go side runs it, the init started meanwhile. */
	dir[dlen] = 0;
	if (!limits)
		pre_spawn(dir, sizeof dir, init, pre, getenv_(envp, "PINFOLD_TRACE") != 0, cfghex);
unmap_key:
	sys2(__NR_munmap, k, kmap);
	return with_maxprocs(sp, room, pre);
}
