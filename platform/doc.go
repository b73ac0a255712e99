// Package platform implements, for each operating system, the interfaces
// that package core declares: peer credentials on the control socket, the
// executables of a process tree, the credential store, login items and
// notifications (starting the daemon in the background is platform/spawn's).
// Unsupported systems get errors that name runtime.GOOS.
package platform
