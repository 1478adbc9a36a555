/*
 * pinfold exec's fast path, part of the launcher blob (launch.c includes
 * this file before pf_launch, which calls fast_exec; the blob's rules hold:
 * no writable globals, no absolute relocations, no C library).
 *
 * An exec is one connect to the session's agent and one request; the Go
 * runtime's start costs more than both. So `pinfold exec [-i] SESSION [--]
 * CMD [ARGS...]`, the session named by its full id or its name and no
 * other flag, is done here before the runtime exists, speaking
 * internal/agent's protocol (a JSON request line, then frames of a type
 * byte and a big-endian u32 length) as cli.execMain does. Everything else returns to the Go side, which does the
 * whole exec as before: other flags, an id prefix, PINFOLD_HOST, a store
 * or record that is not plainly ours, a session not running, an agent that
 * cannot be reached, and an exec the agent refused before the command
 * started (not found, not executable): nothing ran, so the Go side asks
 * again and explains. Once the command runs (the agent's 'p' frame), this
 * code sees it to its end and reports as the Go side would.
 */

#define EX_ID_LEN 12
#define EX_FRAME_MAX (1 << 20) /* agent.maxFrame */
#define EX_PAY_CAP 65536       /* the started and exit frames kept whole */
#define EX_RBUF 65536 /* the socket's reads, and stdin's (-i) */
/* What waits to be sent to the agent: a stdin frame, then signal frames. */
#define EX_OBUF (EX_RBUF + 8 + 6 * 64)
#define EX_MAP (EX_RBUF + EX_OBUF + EX_PAY_CAP)
#define MSG_DONTWAIT 0x40
#define S_IFSOCK 0140000
#define O_PATH 010000000
#define SOCK_STREAM 1
#define EAGAIN 11
#define POLLOUT 4
#define POLLERR 8
#define POLLHUP 16
#define POLLNVAL 32
#define SIGHUP 1
#define SIGINT 2
#define SIGQUIT 3
#define SIGUSR1 10
#define SIGUSR2 12
#define SIGTERM 15
/* terminal.Signals(false): what a user or a supervisor sends to a command. */
#define EX_SIGS ((1UL << (SIGHUP - 1)) | (1UL << (SIGINT - 1)) | (1UL << (SIGQUIT - 1)) | \
		 (1UL << (SIGUSR1 - 1)) | (1UL << (SIGUSR2 - 1)) | (1UL << (SIGTERM - 1)))

struct ex_siginfo {
	u32 signo;
	char rest[124];
};

/* ex_find reports whether s[0:n] holds the NUL-terminated pat. */
static int ex_find(const char *s, long n, const char *pat)
{
	long m = (long)slen(pat);
	for (long i = 0; i + m <= n; i++)
		if (!memcmp(s + i, pat, (size_t)m))
			return 1;
	return 0;
}

/* ex_num reads the number of the top-level key (in pat, "\n  \"KEY\": ")
 * into v: 0 when the key is absent, -1 when its value is not a number. */
static int ex_num(const char *b, long n, const char *pat, u64 *v)
{
	long m = (long)slen(pat), i, digits = 0;
	*v = 0;
	for (i = 0; i + m <= n; i++)
		if (!memcmp(b + i, pat, (size_t)m))
			break;
	if (i + m > n)
		return 0;
	for (i += m; i < n && b[i] >= '0' && b[i] <= '9' && digits < 19; i++, digits++)
		*v = *v * 10 + (u64)(b[i] - '0');
	return digits > 0 && i < n && (b[i] == ',' || b[i] == '\n') ? 1 : -1;
}

/*
 * ex_alive reports whether the record's supervisor runs, as
 * session.supervisorAlive sees it: the process pid whose start time
 * (/proc/PID/stat, field 22) is pid_start, not a zombie. A record without
 * a pid is not checked (session.Store.check).
 */
static int ex_alive(const char *b, long n)
{
	char path[40], num[24], st[1024];
	u64 pid, start, t = 0;
	long fd, r, i, f = 0;
	if (ex_num(b, n, "\n  \"pid\": ", &pid) < 0 || ex_num(b, n, "\n  \"pid_start\": ", &start) < 0)
		return 0;
	if (pid == 0)
		return 1;
	if (pid > 0x7fffffff)
		return 0;
	path[0] = 0;
	utoa(num, (unsigned long)pid);
	scat(path, sizeof path, "/proc/");
	scat(path, sizeof path, num);
	scat(path, sizeof path, "/stat");
	fd = sys3(__NR_open, path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	r = sys3(__NR_read, fd, st, sizeof st);
	sys1(__NR_close, fd);
	if (r <= 0)
		return 0;
	for (i = r - 1; i >= 0 && st[i] != ')'; i--)
		;
	if (i < 0 || i + 3 >= r || st[i + 1] != ' ' || st[i + 2] == 'Z' || st[i + 2] == 'X')
		return 0;
	/* After ") ": the state is the first field, the start time the 20th. */
	for (i += 2; i < r && f < 19; i++)
		if (st[i] == ' ')
			f++;
	if (f < 19)
		return 0;
	for (; i < r && st[i] >= '0' && st[i] <= '9'; i++)
		t = t * 10 + (u64)(st[i] - '0');
	return start != 0 && t == start;
}

/*
 * ex_record reports whether STORE/sessions/ID/session.json (in path) is a
 * running session of the local user, as session.Store.Get and running()
 * see it: ours, a regular file, its id this one, its state "running", no
 * tenant, when name is given that name, and its supervisor alive. The record is written by
 * session.Store.Save (json.MarshalIndent with two spaces): a top-level key
 * starts a line and no string value holds a newline or a bare quote.
 * -1 when there is no such file.
 */
static int ex_record(const char *path, const char *id, const char *name)
{
	char b[8192], want[96];
	struct kstat st;
	long fd = sys3(__NR_open, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0), n;
	if (fd == -ENOENT)
		return -1;
	if (fd < 0)
		return 0;
	if (sys2(__NR_fstat, fd, &st) < 0 || (st.mode & S_IFMT) != S_IFREG || st.uid != (u32)sys0(__NR_geteuid) ||
	    st.size <= 0 || st.size >= (long)sizeof b) {
		sys1(__NR_close, fd);
		return 0;
	}
	n = sys3(__NR_read, fd, b, sizeof b);
	sys1(__NR_close, fd);
	if (n != st.size)
		return 0;
	want[0] = 0;
	scat(want, sizeof want, "{\n  \"id\": \"");
	scat(want, sizeof want, id);
	scat(want, sizeof want, "\",\n");
	if (n <= (long)slen(want) || memcmp(b, want, slen(want)) || !ex_find(b, n, "\n  \"state\": \"running\",\n") ||
	    ex_find(b, n, "\n  \"tenant\": "))
		return 0;
	if (name) {
		want[0] = 0;
		scat(want, sizeof want, "\n  \"name\": \"");
		scat(want, sizeof want, name); /* a valid name needs no escape */
		scat(want, sizeof want, "\",\n");
		if (!ex_find(b, n, want))
			return 0;
	}
	/* The Go side says what a session whose supervisor died is: lost. */
	return ex_alive(b, n);
}

static int ex_isid(const char *s)
{
	if (slen(s) != EX_ID_LEN)
		return 0;
	for (int i = 0; i < EX_ID_LEN; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* ex_name: a session name as session.validName takes it. */
static int ex_name(const char *s)
{
	size_t n = slen(s);
	if (n == 0 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return 0;
	}
	return 1;
}

/*
 * ex_find_session finds ref in the sessions directory (dir, ending in
 * "/") as session.Store.Get does, an id before a name, and writes its id
 * into id: 1 when it names a running session of the local user. A name
 * running sessions share but one at a time (session.Store.Create), so the
 * one running is the newest of that name, which Get takes. A prefix, or
 * anything else, is left to the Go side (0).
 */
static int ex_find_session(char *dir, size_t cap, const char *ref, char *id)
{
	size_t base = slen(dir);
	char buf[4096];
	long fd, n;
	int found = 0, r = -1;
	if (ex_isid(ref)) {
		if (scat(dir, cap, ref) < 0 || scat(dir, cap, "/session.json") < 0)
			return 0;
		r = ex_record(dir, ref, 0);
		dir[base] = 0;
		if (r >= 0) {
			memcpy(id, ref, EX_ID_LEN + 1);
			return r;
		}
	}
	if (!ex_name(ref))
		return 0;
	fd = sys3(__NR_open, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	while ((n = sys3(__NR_getdents64, fd, buf, sizeof buf)) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->reclen;
			if (!ex_isid(d->name) || scat(dir, cap, d->name) < 0 || scat(dir, cap, "/session.json") < 0) {
				dir[base] = 0;
				continue;
			}
			if (ex_record(dir, d->name, ref) == 1) {
				memcpy(id, d->name, EX_ID_LEN + 1);
				found++;
			}
			dir[base] = 0;
		}
	}
	sys1(__NR_close, fd);
	return n == 0 && found == 1;
}

/* ex_dial connects to the agent's socket without following a link in its
 * place (untrusted.DialUnix): the sandbox can write the run directory. */
static long ex_dial(const char *path)
{
	struct {
		u16 family;
		char path[108];
	} sa;
	struct kstat st;
	long pfd = sys3(__NR_open, path, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0), fd = -1;
	if (pfd < 0)
		return -1;
	if (sys2(__NR_fstat, pfd, &st) == 0 && (st.mode & S_IFMT) == S_IFSOCK) {
		memset(&sa, 0, sizeof sa);
		sa.family = AF_UNIX;
		fdpath(sa.path, pfd);
		fd = sys3(__NR_socket, AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && sys3(__NR_connect, fd, &sa, 2 + slen(sa.path) + 1) < 0) {
			sys1(__NR_close, fd);
			fd = -1;
		}
	}
	sys1(__NR_close, pfd);
	return fd;
}

/* ex_write writes all of b to fd, waiting while it is non-blocking and
 * full. -1 when it cannot (a closed pipe raises SIGPIPE, as for Go). */
static int ex_write(int fd, const char *b, long n, int sock)
{
	while (n > 0) {
		long w = sock ? sys6(__NR_sendto, fd, (long)b, n, MSG_NOSIGNAL, 0, 0) : sys3(__NR_write, fd, b, n);
		if (w == -EINTR)
			continue;
		if (w == -EAGAIN) {
			struct pollfd_ p = {fd, POLLOUT, 0};
			sys5(__NR_ppoll, &p, 1, 0, 0, 8);
			continue;
		}
		if (w <= 0)
			return -1;
		b += w, n -= w;
	}
	return 0;
}

/* ex_request builds {"op":"exec","args":[...]}\n as agent's writeRequest
 * does (json.Marshal's escapes decode to the same strings). */
static char *ex_request(int argc, char **argv, int cmd, int in, size_t *len, size_t *mapped)
{
	size_t need = 64;
	char *m, *q, *end;
	int r;
	for (int i = cmd; i < argc; i++)
		need += 6 * slen(argv[i]) + 3;
	if (need > (1 << 20) || !(m = map_anon(need)))
		return 0;
	q = m, end = m + need;
	r = put(&q, end, "{\"op\":\"exec\",\"args\":[", 21);
	for (int i = cmd; i < argc && r == 0; i++)
		r = (i > cmd ? put(&q, end, ",", 1) : 0) | jsonstr(&q, end, argv[i]);
	r |= put(&q, end, "]", 1);
	if (in)
		r |= put(&q, end, ",\"stdin\":true", 13);
	r |= put(&q, end, "}\n", 2);
	if (r < 0) {
		sys2(__NR_munmap, m, need);
		return 0;
	}
	*len = (size_t)(q - m), *mapped = need;
	return m;
}

/* The exit frame (agent.Exit) as json.Marshal writes it: "code" first,
 * then the fields that are set, in their order. */
struct ex_exit {
	long code;
	const char *err; /* the error's JSON string, quotes included */
	long errlen;
	int flags; /* 1 not found, 2 not executable, 4 bad dir, 8 truncated */
};

static int ex_lit(const char **p, const char *end, const char *lit)
{
	size_t n = slen(lit);
	if ((size_t)(end - *p) < n || memcmp(*p, lit, n))
		return 0;
	*p += n;
	return 1;
}

static int ex_int(const char **p, const char *end, long *v)
{
	int neg = 0, digits = 0;
	*v = 0;
	if (*p < end && **p == '-')
		neg = 1, (*p)++;
	while (*p < end && **p >= '0' && **p <= '9' && digits < 12)
		*v = *v * 10 + (*(*p)++ - '0'), digits++;
	if (neg)
		*v = -*v;
	return digits > 0 && digits < 12;
}

/* ex_parse_exit parses b[0:n]; 0 when it is not an exit the agent writes. */
static int ex_parse_exit(const char *b, long n, struct ex_exit *e)
{
	const char *p = b, *end = b + n;
	long sig;
	memset(e, 0, sizeof *e);
	if (!ex_lit(&p, end, "{\"code\":") || !ex_int(&p, end, &e->code))
		return 0;
	if (ex_lit(&p, end, ",\"signal\":") && !ex_int(&p, end, &sig))
		return 0;
	if (ex_lit(&p, end, ",\"error\":\"")) {
		e->err = p - 1;
		for (; p < end && *p != '"'; p++)
			if (*p == '\\')
				p++;
		if (p >= end)
			return 0;
		p++;
		e->errlen = p - e->err;
	}
	if (ex_lit(&p, end, ",\"not_found\":true"))
		e->flags |= 1;
	if (ex_lit(&p, end, ",\"not_executable\":true"))
		e->flags |= 2;
	if (ex_lit(&p, end, ",\"bad_dir\":true"))
		e->flags |= 4;
	if (ex_lit(&p, end, ",\"truncated\":true"))
		e->flags |= 8;
	return p + 1 == end && *p == '}';
}

static int ex_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* ex_unquote decodes the JSON string s[0:n] (quotes included) into d, as
 * encoding/json does (a lone surrogate becomes U+FFFD); returns its length. */
static long ex_unquote(char *d, const char *s, long n)
{
	char *o = d;
	for (long i = 1; i < n - 1; i++) {
		unsigned c = (u8)s[i];
		if (c != '\\') {
			*o++ = (char)c;
			continue;
		}
		c = (u8)s[++i];
		switch (c) {
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			unsigned u = 0;
			for (int k = 0; k < 4; k++) {
				int h = i + 1 < n - 1 ? ex_hex(s[i + 1]) : -1;
				if (h < 0)
					break;
				u = u << 4 | (unsigned)h, i++;
			}
			if (u >= 0xd800 && u < 0xe000)
				u = 0xfffd; /* the agent's encoder writes no surrogates */
			if (u < 0x80) {
				*o++ = (char)u;
			} else if (u < 0x800) {
				*o++ = (char)(0xc0 | u >> 6), *o++ = (char)(0x80 | (u & 0x3f));
			} else {
				*o++ = (char)(0xe0 | u >> 12), *o++ = (char)(0x80 | ((u >> 6) & 0x3f));
				*o++ = (char)(0x80 | (u & 0x3f));
			}
			break;
		}
		default: *o++ = (char)c; /* \" \\ \/ */
		}
	}
	return o - d;
}

/* ex_fail writes "pinfold: CODE WHAT\n  Why: WHY\n  Fix: pinfold session
 * status ID\n" (a fault.Error, as cli.fail prints it; no Why or Fix when
 * not given) and exits 125 (fault.ExitFailed). */
static __attribute__((noreturn)) void ex_fail(const char *code, const char *what, const char *id, const char *rest,
					     const char *why, long whylen, int fix)
{
	char m[512], *q = m, *end = m + sizeof m;
	put(&q, end, "pinfold: ", 9);
	put(&q, end, code, slen(code));
	put(&q, end, " ", 1);
	put(&q, end, what, slen(what));
	put(&q, end, id, slen(id));
	put(&q, end, rest, slen(rest));
	ex_write(2, m, q - m, 0);
	if (why) {
		ex_write(2, "\n  Why: ", 8, 0);
		ex_write(2, why, whylen, 0);
	}
	if (fix) {
		q = m;
		put(&q, end, "\n  Fix: pinfold session status ", 31);
		put(&q, end, id, slen(id));
		ex_write(2, m, q - m, 0);
	}
	ex_write(2, "\n", 1, 0);
	die(125);
}

/* ex_sig queues the frame of the signal waiting in sfd at the end of ob
 * (the caller saw it readable, with room for the frame). */
static void ex_sig(long sfd, char *ob, long *olen)
{
	struct ex_siginfo si;
	if (sys3(__NR_read, sfd, &si, sizeof si) == (long)sizeof si) {
		u8 *f = (u8 *)ob + *olen;
		f[0] = 's', f[1] = f[2] = f[3] = 0, f[4] = 1, f[5] = (u8)si.signo;
		*olen += 6;
	}
}

/*
 * ex_out writes the command's output to fd (1 or 2). While fd is full (a
 * pipe not read yet, a stopped terminal), signals still reach the command,
 * as execMain's relay sends them beside its copy: they are queued in ob
 * and sent as the socket takes them (once the request went, sent says).
 * Writes are of a pipe's atomic size, which poll's POLLOUT promises room
 * for; errors drop the output, as execMain's ignored Write does.
 */
static void ex_out(int fd, const char *b, long n, long sfd, long sock, int sent, char *ob, long *olen, long *ooff)
{
	while (n > 0) {
		struct pollfd_ p[3] = {{fd, POLLOUT, 0},
				       {*olen + 6 <= EX_OBUF ? (int)sfd : -1, POLLIN, 0},
				       {sent && *olen > *ooff ? (int)sock : -1, POLLOUT, 0}};
		long w = sys5(__NR_ppoll, p, 3, 0, 0, 8);
		if (w < 0 && w != -EINTR)
			return;
		if (w <= 0)
			continue;
		if (p[1].revents & POLLIN)
			ex_sig(sfd, ob, olen);
		if (p[2].revents & (POLLOUT | POLLERR | POLLHUP)) {
			w = sys6(__NR_sendto, sock, (long)(ob + *ooff), *olen - *ooff, MSG_NOSIGNAL | MSG_DONTWAIT, 0, 0);
			if (w > 0)
				*ooff += w;
			if ((w < 0 && w != -EAGAIN && w != -EINTR) || *ooff == *olen)
				*ooff = *olen = 0;
		}
		if (!(p[0].revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)))
			continue;
		w = sys3(__NR_write, fd, b, n < 4096 ? n : 4096);
		if (w == -EINTR || w == -EAGAIN)
			continue;
		if (w <= 0)
			return;
		b += w, n -= w;
	}
}

/*
 * fast_exec runs argv's exec when it can (see the top of this file) and
 * exits with its status; it returns, having undone everything, when the Go
 * side must run it.
 */
static void fast_exec(int argc, char **argv, char **envp)
{
	char dir[4096], *req, *rbuf, *pay, *ob, id[EX_ID_LEN + 1];
	const char *rq;
	long rqlen, olen = 0, ooff = 0;
	const char *ref = argv[2], *host = getenv_(envp, "PINFOLD_HOST");
	size_t reqlen = 0, reqmap = 0;
	u64 set = EX_SIGS, old = 0;
	long sock, sfd, n;
	int cmd = 3, started = 0, hlen = 0, type = 0, in = 0;
	u8 hdr[5];
	u32 remain = 0, plen = 0;
	struct kstat st;

	if (host && *host)
		return;
	if (streq(ref, "-i") || streq(ref, "--interactive"))
		in = 1, ref = argv[3], cmd = 4; /* argc >= 4 */
	if (cmd < argc && streq(argv[cmd], "--"))
		cmd++;
	if (cmd >= argc)
		return;
	/* A closed 0, 1 or 2 would be taken by the socket. */
	for (int i = 0; i < 3; i++)
		if (sys2(__NR_fcntl, i, F_GETFD) < 0)
			return;
	/* The store as pf_launch trusts it. */
	if (storedir(dir, sizeof dir, envp) < 0 || sys2(__NR_stat, dir, &st) < 0 || (st.mode & S_IFMT) != S_IFDIR ||
	    st.uid != (u32)sys0(__NR_geteuid) || (st.mode & 022))
		return;
	if (scat(dir, sizeof dir, "/sessions/") < 0 || !ex_find_session(dir, sizeof dir, ref, id))
		return;
	if (scat(dir, sizeof dir, id) < 0 || scat(dir, sizeof dir, "/run/agent.sock") < 0 || (sock = ex_dial(dir)) < 0)
		return;
	if (!(req = ex_request(argc, argv, cmd, in, &reqlen, &reqmap))) {
		sys1(__NR_close, sock);
		return;
	}
	rbuf = map_anon(EX_MAP);
	if (!rbuf) {
		sys2(__NR_munmap, req, reqmap);
		sys1(__NR_close, sock);
		return;
	}
	ob = rbuf + EX_RBUF;
	pay = ob + EX_OBUF;
	/* Caught from before the request, so that none is lost to a default
	 * action while the command starts (execMain's terminal.Catch). */
	sys4(__NR_rt_sigprocmask, SIG_BLOCK, &set, &old, 8);
	sfd = sys4(__NR_signalfd4, -1, &set, 8, O_CLOEXEC);
	if (sfd < 0)
		goto back;
	rq = req, rqlen = (long)reqlen;
	/*
	 * Nothing is sent with a blocking write: the agent may be writing the
	 * command's output while its stdin is full (`cat` of a large input),
	 * and only reading that output lets it go on (execMain sends stdin and
	 * signals from goroutines of their own). The request, then the frames
	 * waiting in ob, go out as the socket takes them; stdin is read only
	 * when ob is empty, a signal only when ob has room for its frame.
	 * Stdin is read once the command runs: an exec refused before goes to
	 * the Go side, which must find all of it.
	 */
	for (;;) {
		int busy = rqlen > 0 || olen > ooff;
		struct pollfd_ p[3] = {{(int)sock, (short)(POLLIN | (busy ? POLLOUT : 0)), 0},
				       {olen + 6 <= EX_OBUF ? (int)sfd : -1, POLLIN, 0},
				       {in && started && !busy ? 0 : -1, POLLIN, 0}};
		n = sys5(__NR_ppoll, p, 3, 0, 0, 8);
		if (n == -EINTR)
			continue;
		if (n < 0)
			break;
		if (p[0].revents & POLLOUT) {
			const char *b = rqlen > 0 ? rq : ob + ooff;
			long w = sys6(__NR_sendto, sock, (long)b, rqlen > 0 ? rqlen : olen - ooff, MSG_NOSIGNAL | MSG_DONTWAIT, 0, 0);
			if (w > 0 && rqlen > 0) {
				rq += w, rqlen -= w;
			} else if (w > 0) {
				ooff += w;
				if (ooff == olen)
					ooff = olen = 0;
			} else if (w != -EAGAIN && w != -EINTR) {
				if (rqlen > 0)
					goto back; /* the request did not go: nothing ran */
				ooff = olen = 0, in = 0; /* as execMain, which drops what it cannot send */
			}
		}
		if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
			/* -i: stdin frames, then its end (execMain's copy, then Close). */
			n = sys3(__NR_read, 0, ob + 5, EX_RBUF);
			if (n != -EINTR && n != -EAGAIN) {
				u32 k = n > 0 ? (u32)n : 0;
				ob[0] = n > 0 ? 'i' : 'I';
				ob[1] = (char)(k >> 24), ob[2] = (char)(k >> 16), ob[3] = (char)(k >> 8), ob[4] = (char)k;
				olen = 5 + (long)k;
				if (n <= 0)
					in = 0;
			}
		}
		if (p[1].revents & POLLIN)
			ex_sig(sfd, ob, &olen);
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		n = sys3(__NR_read, sock, rbuf, EX_RBUF);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0)
			break;
		for (long i = 0; i < n;) {
			if (hlen < 5) {
				hdr[hlen++] = (u8)rbuf[i++];
				if (hlen < 5)
					continue;
				type = hdr[0], plen = 0;
				remain = (u32)hdr[1] << 24 | (u32)hdr[2] << 16 | (u32)hdr[3] << 8 | hdr[4];
				if (remain > EX_FRAME_MAX)
					goto lost;
			} else {
				long k = (long)remain < n - i ? (long)remain : n - i;
				if (type == 'o' || type == 'e')
					ex_out(type == 'o' ? 1 : 2, rbuf + i, k, sfd, sock, rqlen == 0, ob, &olen, &ooff);
				else if ((type == 'x' || type == 'p') && plen + k <= EX_PAY_CAP)
					memcpy(pay + plen, rbuf + i, (size_t)k), plen += (u32)k;
				else if (type == 'x' || type == 'p')
					goto lost;
				i += k, remain -= (u32)k;
			}
			if (remain)
				continue;
			hlen = 0;
			if (type == 'p') {
				started = 1;
			} else if (type == 'x') {
				struct ex_exit e;
				if (!ex_parse_exit(pay, plen, &e)) {
					if (started)
						ex_fail("PF192", "session ", id, ": reading the exit status: not the agent's", 0, 0, 1);
					goto back;
				}
				if (!started && e.err)
					goto back; /* it did not start: the Go side asks again and explains */
				if (e.flags & 8) {
					static const char cut[] = "pinfold: output cut off: a process the command left running held "
								  "it open (redirect its output)\n";
					ex_write(2, cut, sizeof cut - 1, 0);
				}
				if (e.err) {
					/* The error of waiting for a command that ran (cli.execExit). */
					/* Decoded in place: no escape is shorter than what it stands for. */
					long m = ex_unquote((char *)e.err, e.err, e.errlen);
					ex_fail("PF191", "session exec failed", "", "", e.err, m, 0);
				}
				die((int)e.code);
			}
		}
	}
lost:
	if (started)
		ex_fail("PF192", "session ", id, ": the session ended during the command", 0, 0, 1);
back:
	if (req)
		sys2(__NR_munmap, req, reqmap);
	sys2(__NR_munmap, rbuf, EX_MAP);
	if (sfd >= 0)
		sys1(__NR_close, sfd);
	sys1(__NR_close, sock);
	sys4(__NR_rt_sigprocmask, SIG_SETMASK, &old, 0, 8);
}
