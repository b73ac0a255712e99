// The launcher's entry point on linux/amd64 (linked with
// -ldflags=-E=_rt0_portcullis_sandbox, EntrySymbol): it runs before the Go
// runtime starts, while the process still has one thread, which is what
// unshare(CLONE_NEWUSER) requires and what no Go code of a started runtime
// can have. With UnshareArg or UnshareNetArg as argv[1] it moves the
// process into new user and mount namespaces (and a network namespace for
// UnshareNetArg), then maps the person's uid and gid onto themselves, as
// the daemon's clone did before (entry_linux.go says why: the daemon can
// then start the launcher with vfork instead of forking itself). It
// records in entryStep and entryErrno what it did; then its fast path
// (below) makes the whole launch where it can. Whatever it does not do
// ends in the runtime's own entry, _rt0_amd64_linux: the Go code reports a
// failure and does the rest.

#include "textflag.h"

#define SYS_write	1
#define SYS_close	3
#define SYS_fcntl	72
#define SYS_getcwd	79
#define SYS_getuid	102
#define SYS_getgid	104
#define SYS_geteuid	107
#define SYS_capget	125
#define SYS_capset	126
#define SYS_prctl	157
#define SYS_mount	165
#define SYS_execve	59
#define SYS_openat	257
#define SYS_newfstatat	262
#define SYS_unshare	272

#define MS_RDONLY	1
#define MS_NOSUID	2
#define MS_NODEV	4
#define MS_NOEXEC	8
#define MS_REMOUNT	32
#define MS_BIND	4096
#define MS_REC	16384
#define MS_PRIVATE	(1<<18)

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
	LEAQ	uidMapPath<>(SB), R11
	CALL	writeMap<>(SB)
	TESTQ	AX, AX
	JNE	failed

	MOVQ	$4, R15 // entryStepGidMap
	MOVQ	R14, AX
	LEAQ	gidMapPath<>(SB), R11
	CALL	writeMap<>(SB)
	TESTQ	AX, AX
	JNE	failed

	MOVQ	$9, ·entryStep(SB) // entryStepDone
	JMP	fast

failed:
	NEGQ	AX
	MOVQ	AX, ·entryErrno(SB)
	MOVQ	R15, ·entryStep(SB)

runtime:
	JMP	_rt0_amd64_linux(SB)

// The fast path (entry_linux.go, fastStage, says what it does and why):
// the whole launch, or nothing that it cannot leave to the Go code, which
// then does the launch from the start. It gives way (JMP gaveWay) on anything unexpected; only
// the server's execve failing, after the capabilities are dropped, is
// recorded for the Go code to report (fastExecErrno). Registers: R12 the
// address of the first path to hide in argv, R13 their number, R14 the
// server's executable, BX the path at hand, R15 the fast path's stage.
fast:
	MOVQ	$1, R15
	LEAQ	24(SP), R12 // &argv[2]
	MOVQ	0(SP), BX
	SUBQ	$2, BX // the arguments after the mode
	CMPQ	BX, $1
	JLT	gaveWay
	MOVQ	0(R12), SI
	LEAQ	execFdPrefix<>(SB), DI
	CALL	hasPrefix<>(SB) // SI past the prefix when it is there
	TESTQ	AX, AX
	JEQ	count
	CALL	parseUint<>(SB)
	TESTQ	DX, DX
	JEQ	gaveWay
	CMPQ	AX, $3
	JLT	gaveWay
	MOVQ	AX, DI
	MOVQ	$2, SI // F_SETFD
	MOVQ	$1, DX // FD_CLOEXEC
	MOVQ	$SYS_fcntl, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	ADDQ	$8, R12
	DECQ	BX

count:
	CMPQ	BX, $1
	JLT	gaveWay
	MOVQ	0(R12), SI
	CALL	parseUint<>(SB)
	TESTQ	DX, DX
	JEQ	gaveWay
	CMPQ	AX, $1024
	JGT	gaveWay
	MOVQ	AX, R13
	ADDQ	$8, R12
	DECQ	BX
	MOVQ	R13, AX
	ADDQ	$2, AX // the paths, the executable, argv[0]
	CMPQ	BX, AX
	JLT	gaveWay
	MOVQ	0(R12)(R13*8), R14
	LEAQ	8(R12)(R13*8), AX
	MOVQ	AX, serverArgv<>(SB)
	MOVQ	0(SP), AX
	LEAQ	16(SP)(AX*8), AX // envp: past argv and its NULL
	MOVQ	AX, serverEnvp<>(SB)

	// The refusals (a working directory or an executable inside a hidden
	// directory) are the Go code's to make: give way to it.
	MOVQ	$2, R15
	LEAQ	cwd<>(SB), DI
	MOVQ	$4096, SI
	MOVQ	$SYS_getcwd, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	XORQ	BX, BX
checks:
	CMPQ	BX, R13
	JGE	private
	MOVQ	0(R12)(BX*8), SI
	CALL	clean<>(SB) // the byte-wise comparisons below need it
	TESTQ	AX, AX
	JEQ	gaveWay
	MOVQ	0(R12)(BX*8), SI
	LEAQ	cwd<>(SB), DI
	CALL	within<>(SB)
	TESTQ	AX, AX
	JNE	gaveWay
	MOVQ	0(R12)(BX*8), SI
	MOVQ	R14, DI
	CALL	within<>(SB)
	TESTQ	AX, AX
	JNE	gaveWay
	INCQ	BX
	JMP	checks

private:
	MOVQ	$3, R15
	LEAQ	empty<>(SB), DI
	LEAQ	slash<>(SB), SI
	LEAQ	empty<>(SB), DX
	MOVQ	$(MS_REC|MS_PRIVATE), R10
	XORQ	R8, R8
	MOVQ	$SYS_mount, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	XORQ	BX, BX
cover:
	MOVQ	$4, R15
	CMPQ	BX, R13
	JGE	capabilities
	MOVQ	$-100, DI // AT_FDCWD
	MOVQ	0(R12)(BX*8), SI
	LEAQ	statBuf<>(SB), DX
	XORQ	R10, R10
	MOVQ	$SYS_newfstatat, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	next // gone since: nothing to hide
	MOVL	statBuf<>+24(SB), AX // st_mode
	ANDL	$0xf000, AX
	CMPL	AX, $0x4000 // S_IFDIR
	JEQ	directory
	LEAQ	devNull<>(SB), DI
	MOVQ	0(R12)(BX*8), SI
	LEAQ	empty<>(SB), DX
	MOVQ	$MS_BIND, R10
	XORQ	R8, R8
	MOVQ	$SYS_mount, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	JMP	next
directory:
	MOVQ	$5, R15
	LEAQ	tmpfs<>(SB), DI
	MOVQ	0(R12)(BX*8), SI
	LEAQ	tmpfs<>(SB), DX
	MOVQ	$(MS_NOSUID|MS_NODEV|MS_NOEXEC), R10
	LEAQ	tmpfsData<>(SB), R8
	MOVQ	$SYS_mount, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	MOVQ	0(R12)(BX*8), SI
	CALL	writeNote<>(SB)
	MOVQ	$6, R15
	LEAQ	empty<>(SB), DI
	MOVQ	0(R12)(BX*8), SI
	LEAQ	empty<>(SB), DX
	MOVQ	$(MS_REMOUNT|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC), R10
	XORQ	R8, R8
	MOVQ	$SYS_mount, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
next:
	INCQ	BX
	JMP	cover

	// dropCapabilities of launch_linux.go: no ambient and no inheritable
	// capability, and for uid 0 an empty bounding set.
capabilities:
	MOVQ	$7, R15
	MOVQ	$38, DI // PR_SET_NO_NEW_PRIVS: no file capability, no set-user-ID
	MOVQ	$1, SI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$SYS_prctl, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	MOVQ	$47, DI // PR_CAP_AMBIENT
	MOVQ	$4, SI // PR_CAP_AMBIENT_CLEAR_ALL
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$SYS_prctl, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	MOVL	$0x20080522, capHeader<>(SB) // _LINUX_CAPABILITY_VERSION_3
	MOVL	$0, capHeader<>+4(SB) // this thread
	LEAQ	capHeader<>(SB), DI
	LEAQ	capData<>(SB), SI
	MOVQ	$SYS_capget, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	MOVL	$0, capData<>+8(SB) // inheritable, capabilities 0–31
	MOVL	$0, capData<>+20(SB) // and 32–63
	LEAQ	capHeader<>(SB), DI
	LEAQ	capData<>(SB), SI
	MOVQ	$SYS_capset, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	gaveWay
	MOVQ	$SYS_geteuid, AX
	SYSCALL
	TESTQ	AX, AX
	JNE	exec
	XORQ	BX, BX
bounding:
	MOVQ	$24, DI // PR_CAPBSET_DROP
	MOVQ	BX, SI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$SYS_prctl, AX
	SYSCALL
	CMPQ	AX, $-22 // EINVAL: past the kernel's last capability
	JEQ	exec
	CMPQ	AX, $-4095
	JCC	gaveWay
	INCQ	BX
	JMP	bounding

exec:
	MOVQ	$8, R15
	MOVQ	R14, DI
	MOVQ	serverArgv<>(SB), SI
	MOVQ	serverEnvp<>(SB), DX
	MOVQ	$SYS_execve, AX
	SYSCALL
	NEGQ	AX
	MOVQ	AX, ·fastExecErrno(SB)

gaveWay:
	MOVQ	R15, ·fastStage(SB)
	JMP	runtime

// hasPrefix reports in AX whether the NUL-terminated SI begins with the
// NUL-terminated DI, and then leaves SI past it. Clobbers CX, DX, DI.
TEXT hasPrefix<>(SB),NOSPLIT|NOFRAME,$0
	MOVQ	SI, DX
prefixByte:
	MOVBLZX	0(DI), CX
	TESTL	CX, CX
	JEQ	prefixYes
	CMPB	0(DX), CL
	JNE	prefixNo
	INCQ	DI
	INCQ	DX
	JMP	prefixByte
prefixYes:
	MOVQ	DX, SI
	MOVQ	$1, AX
	RET
prefixNo:
	XORQ	AX, AX
	RET

// clean reports in AX whether the NUL-terminated SI is an absolute path
// in clean form (filepath.Clean's): no empty, "." or ".." element and no
// slash at its end, "/" aside. Clobbers CX, DX, SI.
TEXT clean<>(SB),NOSPLIT|NOFRAME,$0
	CMPB	0(SI), $'/'
	JNE	notClean
	CMPB	1(SI), $0
	JEQ	isClean // "/"
element:
	// SI is at a slash: what follows must be an element that is not
	// empty, "." or "..".
	MOVBLZX	1(SI), CX
	TESTL	CX, CX
	JEQ	notClean // a slash at the end
	CMPL	CX, $'/'
	JEQ	notClean // an empty element
	CMPL	CX, $'.'
	JNE	elementBytes
	MOVBLZX	2(SI), DX
	TESTL	DX, DX
	JEQ	notClean // "/."
	CMPL	DX, $'/'
	JEQ	notClean // "/./"
	CMPL	DX, $'.'
	JNE	elementBytes
	MOVBLZX	3(SI), DX
	TESTL	DX, DX
	JEQ	notClean // "/.."
	CMPL	DX, $'/'
	JEQ	notClean // "/../"
elementBytes:
	INCQ	SI
	MOVBLZX	0(SI), CX
	TESTL	CX, CX
	JEQ	isClean
	CMPL	CX, $'/'
	JEQ	element
	JMP	elementBytes
isClean:
	MOVQ	$1, AX
	RET
notClean:
	XORQ	AX, AX
	RET

// parseUint reads the NUL-terminated decimal SI (1 to 9 digits, nothing
// else) into AX; DX is 1 when it was one, else 0. Clobbers CX.
TEXT parseUint<>(SB),NOSPLIT|NOFRAME,$0
	XORQ	AX, AX
	XORQ	DX, DX
digit:
	MOVBLZX	0(SI), CX
	TESTL	CX, CX
	JEQ	parsed
	SUBL	$'0', CX
	CMPL	CX, $9
	JHI	notANumber // also below '0', as unsigned
	IMULQ	$10, AX
	ADDQ	CX, AX
	INCQ	SI
	INCQ	DX
	CMPQ	DX, $9
	JGT	notANumber
	JMP	digit
parsed:
	TESTQ	DX, DX
	JEQ	notANumber
	MOVQ	$1, DX
	RET
notANumber:
	XORQ	DX, DX
	RET

// within reports in AX whether the NUL-terminated path DI is the
// directory SI or inside it (both clean and absolute, as the daemon
// passes them; "/" holds everything). Clobbers CX, DX, DI, SI.
TEXT within<>(SB),NOSPLIT|NOFRAME,$0
	CMPB	0(SI), $'/'
	JNE	withinByte
	CMPB	1(SI), $0
	JEQ	withinYes
withinByte:
	MOVBLZX	0(SI), CX
	TESTL	CX, CX
	JEQ	withinEnd
	CMPB	0(DI), CL
	JNE	withinNo
	INCQ	SI
	INCQ	DI
	JMP	withinByte
withinEnd:
	MOVBLZX	0(DI), CX
	TESTL	CX, CX
	JEQ	withinYes
	CMPL	CX, $'/'
	JEQ	withinYes
withinNo:
	XORQ	AX, AX
	RET
withinYes:
	MOVQ	$1, AX
	RET

// writeNote writes HiddenNote, with HiddenText's text, into the directory
// SI (a fresh tmpfs): as the Go code, it goes on without the note when it
// cannot write it. Clobbers AX, CX, DX, SI, DI, R8–R11.
TEXT writeNote<>(SB),NOSPLIT|NOFRAME,$0
	MOVQ	SI, R9 // the directory
	LEAQ	notePath<>(SB), DI
	XORQ	CX, CX
noteDir:
	MOVB	0(SI)(CX*1), AX
	TESTB	AL, AL
	JEQ	noteName
	CMPQ	CX, $3900
	JGE	noteDone // a path this long gets no note
	MOVB	AL, 0(DI)(CX*1)
	INCQ	CX
	JMP	noteDir
noteName:
	MOVQ	CX, R8 // the directory's length
	MOVQ	·noteName+8(SB), DX
	MOVQ	·noteName(SB), SI
	ADDQ	CX, DI
	XORQ	CX, CX
noteNameByte:
	CMPQ	CX, DX
	JGE	noteOpen
	MOVB	0(SI)(CX*1), AX
	MOVB	AL, 0(DI)(CX*1)
	INCQ	CX
	JMP	noteNameByte
noteOpen:
	MOVB	$0, 0(DI)(CX*1)
	MOVQ	$-100, DI // AT_FDCWD
	LEAQ	notePath<>(SB), SI
	MOVQ	$0x80241, DX // O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC
	MOVQ	$256, R10 // 0400
	MOVQ	$SYS_openat, AX
	SYSCALL
	CMPQ	AX, $-4095
	JCC	noteDone
	MOVQ	AX, R10 // the descriptor
	MOVQ	AX, DI
	MOVQ	R9, SI
	MOVQ	R8, DX
	MOVQ	$SYS_write, AX
	SYSCALL
	MOVQ	R10, DI
	MOVQ	·noteTail(SB), SI
	MOVQ	·noteTail+8(SB), DX
	MOVQ	$SYS_write, AX
	SYSCALL
	MOVQ	R10, DI
	MOVQ	$SYS_close, AX
	SYSCALL
noteDone:
	RET

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

// writeMap writes the map line "ID ID 1\n" for the id in AX to the map
// file at the NUL-terminated path R11 (writeFile's result in AX).
// Clobbers BX, CX, DX, SI, DI, R8–R11.
TEXT writeMap<>(SB),NOSPLIT|NOFRAME,$0
	LEAQ	mapLine<>(SB), DI
	CALL	formatMap<>(SB) // leaves R11
	MOVQ	R11, DI
	LEAQ	mapLine<>(SB), SI
	CALL	writeFile<>(SB)
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

DATA execFdPrefix<>+0(SB)/8, $"--exec-f"
DATA execFdPrefix<>+8(SB)/2, $"d="
GLOBL execFdPrefix<>(SB), RODATA, $16

DATA slash<>+0(SB)/1, $"/"
GLOBL slash<>(SB), RODATA, $8
GLOBL empty<>(SB), RODATA, $8

DATA devNull<>+0(SB)/8, $"/dev/nul"
DATA devNull<>+8(SB)/1, $"l"
GLOBL devNull<>(SB), RODATA, $16

DATA tmpfs<>+0(SB)/5, $"tmpfs"
GLOBL tmpfs<>(SB), RODATA, $8

DATA tmpfsData<>+0(SB)/8, $"size=64k"
DATA tmpfsData<>+8(SB)/8, $",mode=07"
DATA tmpfsData<>+16(SB)/2, $"00"
GLOBL tmpfsData<>(SB), RODATA, $24

GLOBL cwd<>(SB), NOPTR, $4096
GLOBL notePath<>(SB), NOPTR, $4096
GLOBL statBuf<>(SB), NOPTR, $256
GLOBL capHeader<>(SB), NOPTR, $8
GLOBL capData<>(SB), NOPTR, $24
GLOBL serverArgv<>(SB), NOPTR, $8
GLOBL serverEnvp<>(SB), NOPTR, $8
