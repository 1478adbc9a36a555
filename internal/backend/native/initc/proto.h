/*
 * Wire protocol between the pinfold supervisor (Go, internal/backend/native
 * proto.go) and the sandbox init. Both sides must agree on every number here.
 *
 * Transport: one SOCK_SEQPACKET socket, fd 0 of the init. Every message is
 * a header followed by records:
 *
 *   struct msg { u32 type; u32 size; }  size = bytes of records that follow
 *   struct rec { u16 tag; u16 pad; u32 len; u8 data[len]; } padded to 4
 *
 * Strings in records carry their trailing NUL inside len.
 */
#ifndef PF_PROTO_H
#define PF_PROTO_H

/* supervisor -> init, in this order */
#define M_SPAWN 3  /* namespaces and id maps: enough to create the sandbox */
#define M_CONFIG 1 /* everything else: cgroups, idmaps, the root, the command's privileges */
#define M_EXEC 2

/* init -> supervisor */
#define M_PID 10     /* i32 host pid of the sandbox init (stage 2) */
#define M_READY 11   /* root built, waiting for M_EXEC */
#define M_PTY 12     /* SCM_RIGHTS: pty master */
#define M_STARTED 13 /* i32 pid of the command inside the sandbox */
#define M_EXIT 14    /* i32 wait status, u32 flags, then with C_TRACE: u64 pairs (mark, CLOCK_MONOTONIC ns) */
#define M_ERROR 15   /* u32 step, i32 errno, i32 op index, char detail[] */
#define M_TUN 16     /* SCM_RIGHTS: the sandbox's TUN device, configured (C_TUN) */

/* M_EXIT flags */
#define EXIT_TMP_FULL 1
/* Nothing but the init was left in the sandbox when the command ended: no
 * process can write to its files any more (the waiter need not wait for
 * the sandbox's teardown before it looks at the changeset). */
#define EXIT_ALONE 2

/* M_SPAWN record tags */
#define C_NSFLAGS 1   /* u64 clone flags for the namespaces */
#define C_UIDMAP 2    /* string written to uid_map */
#define C_GIDMAP 3    /* string written to gid_map */
#define C_SETGROUPS 4 /* string written to setgroups ("deny") before gid_map */
#define C_INITID 16   /* u32 uid, u32 gid the init switches to (root invocations) */
#define C_TRACE 21    /* record timestamps and send them with M_EXIT (benchmarks) */
#define C_TUN 22      /* struct tunconf: create and configure a TUN device, send it as M_TUN */
#define C_NOMPTCP 25  /* turn MPTCP off in the new network namespace (Landlock's TCP rules miss it) */
/*
 * C_CGSELF: string, a cgroup v1 "tasks" file stage 1 writes "0" into
 * before it clones stage 2, which then starts in that group. A thread
 * that moves itself does not take the cgroup threadgroup lock, whose
 * writer waits for an RCU grace period (milliseconds on a busy host), as
 * writing a pid into cgroup.procs does (a launch record's replay).
 */
#define C_CGSELF 40

/*
 * C_TUN payload. The device is opened by stage 2 in its new network
 * namespace before it switches ids (the host's /dev/net/tun may be root's).
 */
struct tunconf {
	unsigned int mtu;
	unsigned int flags;
	unsigned char addr4[4];
	unsigned int prefix4;
	unsigned char addr6[16];
	unsigned int prefix6;
	char name[16];
};

#define TUN_ROUTE4 1 /* a default IPv4 route through the device */
#define TUN_ADDR6 2  /* give the device addr6 (skipped when the kernel has no IPv6) */
#define TUN_ROUTE6 4 /* a default IPv6 route through the device */

/* M_CONFIG record tags */
#define C_CGROUP 5    /* string: a cgroup.procs file stage 1 writes the init pid to */
#define C_IDMAP 6     /* two strings: uid_map, gid_map of a separate userns used to idmap mounts */
#define C_OP 7        /* one root-building operation, see struct op below */
#define C_HOSTNAME 8  /* string */
#define C_SCRATCH 9   /* string: host dir the staging tmpfs is mounted on */
#define C_LOUP 10     /* bring lo up */
#define C_SECCOMP 11  /* struct sock_filter[] */
#define C_CAPS 12     /* u64 capability mask the command keeps */
#define C_RLIMIT 13   /* u32 resource, u32 pad, u64 cur, u64 max */
#define C_USER 14     /* u32 uid, u32 gid of the command inside */
#define C_GROUPS 15   /* u32[] supplementary groups of the command */
#define C_ROOTRO 17   /* remount the root read-only when built */
#define C_TMPCHECK 18 /* string: path whose fullness is reported at exit */
#define C_CAPLAST 19  /* u32 highest capability number of the kernel */
#define C_NNP 20      /* set no_new_privs before exec */
#define C_LANDLOCK 23 /* u64 handled fs access, u64 handled net access: restrict the command with Landlock */
#define C_LLRULE 24   /* u64 allowed fs access, then a string: a path inside the built root */

/* M_EXEC record tags */
#define E_ARG 1    /* string, repeated */
#define E_ENV 2    /* string, repeated */
#define E_CWD 3    /* string */
#define E_TTY 4    /* u16 rows, u16 cols: allocate a pty */
#define E_FDS 5    /* u32 n: SCM_RIGHTS carries n fds for 0..n-1 */
#define E_SETSID 6 /* start the command in a new session */

/*
 * C_OP payload: struct op, then four strings (u32 len + bytes each, len 0 =
 * absent): a, b, c, d.
 */
struct op {
	unsigned int kind;
	unsigned int flags;
	unsigned long long mflags; /* MS_* for mount(2) */
	unsigned long long attr;   /* MOUNT_ATTR_* applied recursively after binds */
	unsigned int mode;
	unsigned int pad;
};

#define OP_MKDIR 1   /* b=path mode */
#define OP_MKFILE 2  /* b=path mode a=content */
#define OP_SYMLINK 3 /* a=target b=path */
#define OP_MOUNT 4   /* a=source b=target c=fstype d=data mflags */
#define OP_BIND 5    /* a=source b=target mflags attr */
#define OP_IDMAP 6   /* a=host source b=target attr: stage 1 clones (as the host sees the path) and idmaps, stage 2 attaches */
#define OP_MASK 7    /* b=path: /dev/null over files, empty read-only tmpfs over dirs */
#define OP_CHMOD 8   /* b=path mode */
#define OP_SETATTR 9 /* b=path attr, recursive when mflags has MS_REC */
#define OP_UMOUNT 10 /* b=path: detach the mount there */
#define OP_RMDIR 11  /* b=path: remove an empty directory */
/*
 * OP_FUSE: a=host path of a squashfs image file, b=mount point, c=host path
 * of squashfuse, d="DEV INO SIZE MSEC MNSEC CSEC CNSEC OFFSET" (decimal):
 * stage 1 opens a, checks that it is the file of that identity, and opens
 * /dev/fuse as the sandbox's user namespace; stage 2 mounts it at b and
 * starts squashfuse (in the sandbox's namespaces) to serve the image at
 * OFFSET in the file.
 */
#define OP_FUSE 12

/* op flags */
#define OPF_HOSTSRC 1  /* a is a host path (resolved under the old root) */
#define OPF_OPTIONAL 2 /* a missing source is skipped */
#define OPF_NOIDMAP 4  /* OP_IDMAP: clone only, keep the ids as they are */

/* M_ERROR steps */
#define ST_CONFIG 1
#define ST_CLONE 2
#define ST_SETGROUPS 3
#define ST_UIDMAP 4
#define ST_GIDMAP 5
#define ST_CGROUP 6
#define ST_IDMAP_USERNS 7
#define ST_OPEN_TREE 8
#define ST_MOUNT_SETATTR 9
#define ST_SETID 10
#define ST_PRIVATE 11
#define ST_SCRATCH 12
#define ST_PIVOT 13
#define ST_OP 14
#define ST_DETACH 15
#define ST_ROOTRO 16
#define ST_HOSTNAME 17
#define ST_LOUP 18
#define ST_EXECMSG 19
#define ST_PTY 20
#define ST_CHDIR 21
#define ST_RLIMIT 22
#define ST_CAPS 23
#define ST_GROUPS 24
#define ST_SETUID 25
#define ST_NNP 26
#define ST_SECCOMP 27
#define ST_EXEC 28
#define ST_FORK 29
#define ST_STDIO 30
#define ST_TUN 31
#define ST_FUSE 32
#define ST_LANDLOCK 33

#endif
