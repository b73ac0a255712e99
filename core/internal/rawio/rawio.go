// Package rawio reads and writes the daemon's pipes and sockets with raw
// system calls, without telling the Go scheduler that a system call began.
//
// Why: every read(2) or write(2) made through os.File or net.Conn enters the
// runtime's syscall state (entersyscall), and the first one after the
// process was idle wakes the runtime's monitor thread (sysmon) from its deep
// sleep and resets its poll interval to 20 µs. A proxy that goes idle between
// two messages (one caller waits for the server, then for the agent) wakes
// it twice per tools/call: a futex wake, sysmon's 20 µs sleeps, its next deep
// sleep, and the context switches of each. On a non-blocking descriptor a
// read or write never blocks, so the scheduler has nothing to gain from
// knowing about it: the calls here go straight to the kernel
// (syscall.RawSyscall) and still wait for readiness through the runtime's
// poller (syscall.RawConn), so deadlines, Close and the goroutine's parking
// behave as with the ordinary Read and Write.
//
// A raw call must never block: it would hold its processor for as long as
// the kernel keeps it. Sockets are read and written with recv(2) and send(2)
// and MSG_DONTWAIT, which do not block whatever the descriptor's mode (a
// copy of the connection passed through os.File.Fd makes the shared
// descriptor blocking); files (pipes) take the raw path only when their
// descriptor is non-blocking, and NewReader and NewWriter return anything
// else unchanged. Systems other than Linux take the ordinary path too (on
// macOS system calls go through libc).
package rawio
