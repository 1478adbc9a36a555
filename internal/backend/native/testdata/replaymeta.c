/*
 * replaymeta runs launch.c's new_changeset on its own, for
 * TestReplayMetaMatchesGo: "replaymeta STORE METATAIL COMMAND..."
 * creates a changeset in STORE as a replay does and prints its id.
 */
#include "../initc/launch.c"

__attribute__((used)) void replaymeta_main(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1), *cfg;
	struct launch l;
	memset(&l, 0, sizeof l);
	if (argc < 4)
		sys1(__NR_exit_group, 2);
	l.store = argv[1], l.metatail = argv[2];
	l.uid = (u32)sys0(__NR_getuid), l.gid = (u32)sys0(__NR_getgid), l.upmode = 0755;
	l.config = "-", l.config_len = 1;
	if (!(cfg = new_changeset(&l, argc, argv, 3)))
		sys1(__NR_exit_group, 1);
	sys3(__NR_write, 1, l.id, CHANGESET_ID_LEN);
	sys1(__NR_exit_group, 0);
}

__asm__(".globl _start\n_start:\n\tmov %rsp, %rdi\n\tand $-16, %rsp\n\tcall replaymeta_main\n\thlt\n");
