#include "textflag.h"

// pinfold_entry is the process's entry point when the binary is linked
// with -E pinfold_entry (scripts/setup.sh does). Before the Go runtime
// exists, pinfold_launch (initc/launch.c, in launch_amd64.s) replays a
// recorded `pinfold run` or returns, having started a first run's init in
// launcherSpawn if it could; the runtime then starts as it would have from
// its own entry point, from the stack pinfold_launch returns: the initial
// one, or a copy of it with one more environment variable (launch.c:
// with_maxprocs) in the ENV_ROOM (16 KiB) left below it.
TEXT pinfold_entry(SB), NOSPLIT|NOFRAME, $0
	MOVQ SP, DI
	SUBQ $16384, SP
	ANDQ $~15, SP
	MOVQ SP, CX
	LEAQ ·initBinary(SB), SI
	LEAQ ·launcherSpawn(SB), DX
	CALL pinfold_launch(SB)
	MOVQ AX, SP
	JMP  _rt0_amd64_linux(SB)
