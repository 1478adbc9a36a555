/*
 * Raw system calls and clone for x86_64. The init links
 * no C library: it runs in a vfork child and as PID 1, where library locks
 * and per-thread bookkeeping would be wrong, and it must start in as few
 * page faults as possible.
 */
#ifndef PF_SYS_AMD64_H
#define PF_SYS_AMD64_H

static inline long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/*
 * pf_clone(flags, stack_top, fn, arg) starts a child on its own stack that
 * runs fn(arg) and exits with its result. The parent gets the child's pid
 * (or -errno). Works for CLONE_VM children, which must not return into the
 * parent's frames.
 */
long pf_clone(unsigned long flags, void *stack_top, int (*fn)(void *), void *arg);
__asm__(".text\n"
	".globl pf_clone\n"
	".type pf_clone,@function\n"
	"pf_clone:\n"
	"	and $-16, %rsi\n"
	"	sub $16, %rsi\n"
	"	mov %rdx, 0(%rsi)\n"
	"	mov %rcx, 8(%rsi)\n"
	"	xor %edx, %edx\n"
	"	xor %r10d, %r10d\n"
	"	xor %r8d, %r8d\n"
	"	mov $56, %eax\n" /* SYS_clone */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz 1f\n"
	"	xor %ebp, %ebp\n"
	"	pop %rax\n"
	"	pop %rdi\n"
	"	call *%rax\n"
	"	mov %eax, %edi\n"
	"	mov $231, %eax\n" /* SYS_exit_group */
	"	syscall\n"
	"	hlt\n"
	"1:	ret\n");

#endif
