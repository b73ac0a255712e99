// Package harness drives real Portcullis processes for the end-to-end tests
// (package e2e), the scripted demo (internal/demo) and the relay benchmark
// (bench/): it finds the repository, builds `portcullis` and the Go test
// servers, gives each run its own PORTCULLIS_HOME, starts and stops
// `portcullis daemon`, connects go-sdk clients through `portcullis connect`,
// records the JSON-RPC messages a client exchanges, and reads the kernel's
// view of processes (/proc on Linux).
//
// Everything here runs real executables; nothing is faked. Helpers return
// errors rather than taking a *testing.T so that the demo and the benchmark
// programs can use them too.
package harness
