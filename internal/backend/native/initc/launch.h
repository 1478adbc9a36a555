/*
 * The launch record format, shared by launch.c (the reader) and launch.go
 * (the writer, which spells the same numbers).
 *
 * A record file is LAUNCH_MAGIC, a u32 version, a u32 zero, then records:
 *
 *   struct { u16 tag; u16 pad; u32 len; u8 data[len]; } padded to 8
 */
#ifndef PF_LAUNCH_H
#define PF_LAUNCH_H

#define LAUNCH_MAGIC "PFLAUNCH"
#define LAUNCH_VERSION 1
/* The key's first bytes (with their NUL). */
#define LAUNCH_KEY_MAGIC "pinfold-launch-1"
#define LAUNCH_MAX_RECORD (4 << 20)
#define LAUNCH_MAX_MESSAGE (200 * 1024)
/* The spawn hint, <store>/spawn-hint: an M_SPAWN message, no more. */
#define LAUNCH_MAX_SPAWN 4096
/* A config hint, <store>/hints/HASH: an M_SPAWN message, then an
 * M_CONFIG message of at most this many bytes (queued on the init's
 * socket before the init runs: well within a socket's buffer). */
#define LAUNCH_MAX_CONFIG_HINT (64 * 1024)

#define R_KEY 1    /* u64 length, u64 FNV-1a, u64 FNV-1a with another basis of the key */
#define R_DEP 2    /* struct launch_dep, the path, for DEP_LINK the target */
#define R_EMPTY 3  /* a directory that must be empty or absent */
#define R_SPAWN 4  /* the M_SPAWN message */
#define R_CONFIG 5 /* the M_CONFIG message */
#define R_EXEC 6   /* the M_EXEC message, its E_ARG records first */
#define R_WAIT 7   /* the waiter's timeout and /tmp-full messages, NUL-terminated */
#define R_OPTS 8   /* u32 flags, u32 zero, u64 timeout in ns (0: none) */
/*
 * R_CHANGESET: the run keeps a new changeset of one directory. u32 count,
 * u32 uid, u32 gid (the owner of its r0, upper and work directories: the
 * sandbox's root when ids are mapped), u32 zero, then count u32 offsets in
 * the M_CONFIG message where the recorded
 * run's 12-digit changeset id stands (in its upper and work paths), then
 * NUL-terminated: the store, the pinfold binary, and the end of the
 * changeset's meta.json after its "command" (see launch.go).
 */
#define R_CHANGESET 9
#define CHANGESET_ID_LEN 12
/*
 * R_NET: the run's network stack is the shared helper's. NUL-terminated:
 * its socket, the store's runs directory (for the run's violation log);
 * then the configuration message to send it (see launch.go: LaunchNet).
 */
#define R_NET 10
/*
 * R_CGROUP: the run has memory, pids or CPU limits. NUL-terminated
 * strings; the first of each entry starts with its kind, then (but for
 * "d") the index of its group as one digit:
 *   "d" PARENT            a group PARENT/<pid>-<start time>-1, made 0755
 *   "w" I FILE, VALUE     written into the group's FILE, in this order
 *   "o" I FILE, VALUE     likewise; a missing FILE is fine (memsw, swap)
 *   "m" I FILE, OOMMSG, MEMMSG   the waiter's -m (memory events)
 *   "p" I FILE, PIDSMSG          the waiter's -p (pids events)
 * The M_CONFIG message then has no C_CGROUP: the launcher writes the
 * init's pid into each group's cgroup.procs itself (see launch.go).
 */
#define R_CGROUP 11
#define LAUNCH_MAX_CGROUPS 8 /* MAXCG in init.c's waiter */

/* R_OPTS flags */
#define LAUNCH_ANY_COMMAND 1 /* the plan does not depend on the command: any may replace it */
#define LAUNCH_STDIN 2       /* pass stdin (-i) instead of /dev/null */

#define DEP_STAT 1   /* stat(2) of the path gives the same fields */
#define DEP_LSTAT 2  /* likewise, not following a final symbolic link */
#define DEP_ABSENT 3 /* stat(2) of the path fails with ENOENT or ENOTDIR */
#define DEP_LINK 4   /* readlink(2) of the path gives the target */
#define DEP_LABSENT 5 /* lstat(2) of the path fails with ENOENT or ENOTDIR */
#define DEP_ATTR 6    /* stat(2) gives the same type, mode and owner (not times: a workspace changes) */
#define DEP_LATTR 7   /* likewise with lstat(2) */

struct launch_dep {
	unsigned int kind, pad;
	unsigned long long dev, ino;
	unsigned int mode, uid, gid, pad2;
	long long size, mtime, mtime_ns, ctime, ctime_ns;
};

#endif
