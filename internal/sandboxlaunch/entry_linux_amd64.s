// The launcher's entry point on linux/amd64 (linked with
// -ldflags=-E=_rt0_portcullis_sandbox, EntrySymbol): it runs before the Go
// runtime starts, while the process still has one thread, which is what
// unshare(CLONE_NEWUSER) requires and what no Go code of a started runtime
// can have. With UnshareArg or UnshareNetArg as argv[1] it moves the
// process into new user and mount namespaces (and a network namespace for
// UnshareNetArg), then maps the person's uid and gid onto themselves, as
// the daemon's clone did before (entry_linux.go says why: the daemon can
// then start the launcher with vfork instead of forking itself). It
// records in enteredStep and enteredErrno what it did, and always ends in
// the runtime's own entry, _rt0_amd64_linux: the Go code reports a failure
// and does the rest.

#include "textflag.h"

#define SYS_write	1
#define SYS_close	3
#define SYS_getuid	102
#define SYS_getgid	104
#define SYS_openat	257
#define SYS_unshare	272

#define CLONE_NEWNS	0x00020000
#define CLONE_NEWUSER	0x10000000
#define CLONE_NEWNET	0x40000000

// The process's first instruction. 0(SP) is argc, argv[0] is at 8(SP);
// the stack is left as the kernel made it, for the runtime's entry.
// Registers kept across the steps: R12 the unshare flags, R13 the uid,
// R14 the gid, R15 the step being taken (entryStep* in entry_linux.go).
TEXT _rt0_portcullis_sandbox(SB),NOSPLIT|NOFRAME,$0
	MOVQ	$1, ·entryRan(SB)
	MOVQ	0(SP), AX
	CMPQ	AX, $2
	JLT	runtime
	MOVQ	16(SP), SI // argv[1]: "-U" or "-N", NUL-terminated
	CMPB	0(SI), $'-'
	JNE	runtime
	CMPB	2(SI), $0
	JNE	runtime
	MOVQ	$(CLONE_NEWUSER|CLONE_NEWNS), R12
	CMPB	1(SI), $'U'
	JEQ	enter
	CMPB	1(SI), $'N'
	JNE	runtime
	ORQ	$CLONE_NEWNET, R12

enter:
	// The ids before unshare: inside, until mapped, they read as the
	// overflow id.
	MOVQ	$SYS_getuid, AX
	SYSCALL
	MOVQ	AX, R13
	MOVQ	$SYS_getgid, AX
	SYSCALL
	MOVQ	AX, R14

	MOVQ	$1, R15 // entryStepUnshare
	MOVQ	R12, DI
	MOVQ	$SYS_unshare, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	failed

	MOVQ	$2, R15 // entryStepSetgroups: required before an unprivileged gid_map
	LEAQ	setgroupsPath<>(SB), DI
	LEAQ	denyText<>(SB), SI
	MOVQ	$4, DX
	CALL	writeFile<>(SB)
	TESTQ	AX, AX
	JNE	failed

	MOVQ	$3, R15 // entryStepUidMap
	MOVQ	R13, AX
	LEAQ	mapLine<>(SB), DI
	CALL	formatMap<>(SB)
	LEAQ	uidMapPath<>(SB), DI
	LEAQ	mapLine<>(SB), SI
	CALL	writeFile<>(SB)
	TESTQ	AX, AX
	JNE	failed

	MOVQ	$4, R15 // entryStepGidMap
	MOVQ	R14, AX
	LEAQ	mapLine<>(SB), DI
	CALL	formatMap<>(SB)
	LEAQ	gidMapPath<>(SB), DI
	LEAQ	mapLine<>(SB), SI
	CALL	writeFile<>(SB)
	TESTQ	AX, AX
	JNE	failed

	MOVQ	$9, ·entryStep(SB) // entryStepDone
	JMP	runtime

failed:
	NEGQ	AX
	MOVQ	AX, ·entryErrno(SB)
	MOVQ	R15, ·entryStep(SB)

runtime:
	JMP	_rt0_amd64_linux(SB)

// writeFile writes DX bytes at SI to the existing file at the
// NUL-terminated path DI, in one write, and closes it. AX is 0, or minus
// the errno of the call that failed (EIO for a short write). Clobbers CX,
// DX, SI, DI, R8–R11.
TEXT writeFile<>(SB),NOSPLIT|NOFRAME,$0
	MOVQ	SI, R8 // the bytes
	MOVQ	DX, R9 // their length
	MOVQ	DI, SI
	MOVQ	$-100, DI // AT_FDCWD
	MOVQ	$0x80001, DX // O_WRONLY|O_CLOEXEC
	MOVQ	$0, R10
	MOVQ	$SYS_openat, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	done
	MOVQ	AX, DI
	MOVQ	AX, R10 // the descriptor, to close
	MOVQ	R8, SI
	MOVQ	R9, DX
	MOVQ	$SYS_write, AX
	SYSCALL
	MOVQ	AX, R8 // what write returned
	MOVQ	R10, DI
	MOVQ	$SYS_close, AX
	SYSCALL
	MOVQ	R8, AX
	CMPQ	AX, $-4095
	JCC	done
	CMPQ	AX, R9
	JEQ	wrote
	MOVQ	$-5, AX // EIO: the kernel took part of a map line
	RET
wrote:
	MOVQ	$0, AX
done:
	RET

// formatMap writes "ID ID 1\n" for the id in AX at DI (room for 32 bytes)
// and returns its length in DX. Clobbers AX, BX, CX, SI, DI, R8–R10.
TEXT formatMap<>(SB),NOSPLIT|NOFRAME,$0
	MOVQ	DI, R8 // the line's start
	LEAQ	digits<>+24(SB), R9 // the digits' end; they are written backwards
	MOVQ	R9, R10
	MOVQ	$10, CX
next:
	XORQ	DX, DX
	DIVQ	CX
	ADDQ	$'0', DX
	DECQ	R10
	MOVB	DL, 0(R10)
	TESTQ	AX, AX
	JNE	next
	MOVQ	R10, SI
first:
	MOVB	0(SI), BX
	MOVB	BX, 0(DI)
	INCQ	SI
	INCQ	DI
	CMPQ	SI, R9
	JNE	first
	MOVB	$' ', 0(DI)
	INCQ	DI
	MOVQ	R10, SI
second:
	MOVB	0(SI), BX
	MOVB	BX, 0(DI)
	INCQ	SI
	INCQ	DI
	CMPQ	SI, R9
	JNE	second
	MOVB	$' ', 0(DI)
	MOVB	$'1', 1(DI)
	MOVB	$'\n', 2(DI)
	ADDQ	$3, DI
	MOVQ	DI, DX
	SUBQ	R8, DX
	RET

// The paths and texts, NUL-terminated: the bytes a GLOBL's size leaves
// past its DATA are zero.
DATA setgroupsPath<>+0(SB)/8, $"/proc/se"
DATA setgroupsPath<>+8(SB)/8, $"lf/setgr"
DATA setgroupsPath<>+16(SB)/4, $"oups"
GLOBL setgroupsPath<>(SB), RODATA, $24

DATA uidMapPath<>+0(SB)/8, $"/proc/se"
DATA uidMapPath<>+8(SB)/8, $"lf/uid_m"
DATA uidMapPath<>+16(SB)/2, $"ap"
GLOBL uidMapPath<>(SB), RODATA, $24

DATA gidMapPath<>+0(SB)/8, $"/proc/se"
DATA gidMapPath<>+8(SB)/8, $"lf/gid_m"
DATA gidMapPath<>+16(SB)/2, $"ap"
GLOBL gidMapPath<>(SB), RODATA, $24

DATA denyText<>+0(SB)/4, $"deny"
GLOBL denyText<>(SB), RODATA, $8

// A map line: two ids of at most 10 digits, two spaces, "1\n".
GLOBL mapLine<>(SB), NOPTR, $32
GLOBL digits<>(SB), NOPTR, $24
