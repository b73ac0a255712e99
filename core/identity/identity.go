// Package identity measures the execution identity of a local MCP server: which
// code will receive a call. The supervisor, not the server, is the witness: before
// launch it resolves the command through PATH and symlinks and digests the
// executable, a shebang interpreter, the entry script, the nearest lockfile,
// wrapper scripts and the paths the person names; after launch it records the
// kernel's view of the running process tree. Every new record is bound to a new
// execution epoch (a ULID) minted here, never by the server.
//
// Digests are SHA-256 (FIPS 180-4) written as "sha256:<64 lowercase hex>".
package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// DigestPrefix is the prefix of every digest string this package produces.
const DigestPrefix = "sha256:"

// ShortDigest is how a digest is shown to a person: the first twelve hex
// digits of a "sha256:" digest followed by an ellipsis, "none" for an
// absent one. Other values that stand where digests do (a runtime version,
// a path) are kept whole.
func ShortDigest(d string) string {
	if d == "" {
		return "none"
	}
	h, ok := strings.CutPrefix(d, DigestPrefix)
	if ok && len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// ErrCommandNotFound reports that a launch command does not resolve to an
// executable regular file (missing from PATH, missing on disk, a directory, or
// without an execute bit). Errors wrap it with the command and the reason.
var ErrCommandNotFound = errors.New("command not found")

// FileDigest is one file and its content digest. Path is absolute with symlinks
// resolved; SHA256 is "sha256:<hex>".
type FileDigest struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// Observed is one process of a running server's tree as the kernel reports it.
// Exe is the kernel's executable path (on Linux it may end in " (deleted)" when
// the file was replaced); SHA256 is the digest of the file the process is
// actually running, empty when it could not be read (the process had exited).
// StartTime pairs with PID to tell a reused pid apart; its unit is
// kernel-specific (Linux: clock ticks since boot, /proc/PID/stat field 22;
// macOS: microseconds since the Unix epoch).
//
// Script and ScriptSHA256 name the script an interpreter runs (node, python,
// deno, bun, java -jar, a shell running a file), read from the process's own
// arguments and working directory as the kernel reports them after its exec;
// empty when the process is no interpreter or runs inline code or a module.
type Observed struct {
	PID          int    `json:"pid"`
	PPID         int    `json:"ppid,omitempty"`
	Exe          string `json:"exe"`
	SHA256       string `json:"sha256,omitempty"`
	StartTime    uint64 `json:"startTime,omitempty"`
	Script       string `json:"script,omitempty"`
	ScriptSHA256 string `json:"scriptSha256,omitempty"`
}

// Code is what o runs, without which process runs it: the executable's
// digest and the script's path and digest.
func (o Observed) Code() string { return o.SHA256 + " " + o.Script + " " + o.ScriptSHA256 }

// Record is the execution record of one launch of one server (docs/DESIGN.md,
// "Execution identity"). [Measurer.Measure] fills everything measured before
// launch; the supervisor adds Epoch (ids.NewEpoch), ProcessID, StartedAt and,
// once the launcher's exec settled, Observed (the supervisor's tree watcher;
// [Observe] where the tree is not watched), which each epoch the supervisor
// observes later replaces. Digest fields are "sha256:<hex>"; paths
// are absolute with symlinks resolved, except ExtraDigests keys, which are the
// watch entries exactly as configured.
type Record struct {
	ServerLabel        string            `json:"serverLabel"`
	LaunchCommand      []string          `json:"launchCommand"`
	ResolvedExecutable FileDigest        `json:"resolvedExecutable"`
	Runtime            string            `json:"runtime,omitempty"`     // e.g. "node v22.14.0"
	EntryDigest        string            `json:"entryDigest,omitempty"` // script argument digest, or the binary itself
	Entry              string            `json:"entry,omitempty"`       // its absolute path
	Interpreter        *FileDigest       `json:"interpreter,omitempty"` // shebang interpreter
	LockfileDigest     string            `json:"lockfileDigest,omitempty"`
	Lockfile           string            `json:"lockfile,omitempty"`
	Wrappers           []FileDigest      `json:"wrappers,omitempty"`
	ExtraDigests       map[string]string `json:"extraDigests,omitempty"` // watched paths (files or dirs) -> "sha256:…"
	Package            *PackageDigest    `json:"package,omitempty"`      // the entry's package, measured when no path is watched
	// Ignore are the server's own ignore patterns, which leave data out of
	// its watched trees (see [Measurer.DigestTreeData]).
	Ignore []string `json:"ignore,omitempty"`
	// Environment holds the variables of [CodeEnvironment] set for the
	// launch, name → value: they change what code runs.
	Environment      map[string]string `json:"environment,omitempty"`
	WorkingDirectory string            `json:"workingDirectory"`
	Observed         []Observed        `json:"observed,omitempty"`
	Epoch            ids.EpochID       `json:"epoch"`
	ProcessID        int               `json:"processId"`
	StartedAt        time.Time         `json:"startedAt"`
}

// ProcessInfo is the kernel's view of processes, implemented per OS in the
// platform package (Linux /proc, macOS sysctl).
type ProcessInfo interface {
	// Tree returns the process and its descendants as the kernel sees them,
	// with each executable path: pid first, then descendants breadth-first.
	// An error wrapping fs.ErrNotExist means pid does not exist.
	Tree(pid int) ([]Observed, error)
	// OpenExecutable opens the file the kernel says pid is running (Linux
	// /proc/PID/exe works even if the file was replaced on disk). An error
	// wrapping fs.ErrNotExist means the process is gone.
	OpenExecutable(pid int) (io.ReadCloser, error)
}

// Observe returns the process tree rooted at pid as pi reports it, with SHA256
// filled by reading each process's running executable through
// pi.OpenExecutable. A process that exits between listing and reading keeps an
// empty SHA256; any other read error is returned with the pid and path.
func Observe(ctx context.Context, pi ProcessInfo, pid int) ([]Observed, error) {
	tree, err := pi.Tree(pid)
	if err != nil {
		return nil, fmt.Errorf("observing process %d: %w", pid, err)
	}
	for i := range tree {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sum, err := digestExecutable(ctx, pi, tree[i].PID)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("observing process %d (%s): %w", tree[i].PID, tree[i].Exe, err)
		}
		tree[i].SHA256 = sum
	}
	return tree, nil
}

func digestExecutable(ctx context.Context, pi ProcessInfo, pid int) (string, error) {
	rc, err := pi.OpenExecutable(pid)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, ctxReader{ctx, rc}, make([]byte, 256<<10)); err != nil {
		return "", err
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// CodeEnvironment are the environment variables that change what code a
// server runs beside its files: module and library search paths, code
// loaded at start-up, options that add code (NODE_OPTIONS=--require x).
// Their values at launch are part of the execution record.
var CodeEnvironment = []string{
	"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONINSPECT",
	"NODE_OPTIONS", "NODE_PATH", "NODE_LOADER",
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
	"DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "DYLD_FRAMEWORK_PATH", "DYLD_FALLBACK_LIBRARY_PATH",
	"PERL5LIB", "PERLLIB", "PERL5OPT", "RUBYLIB", "RUBYOPT",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
	"BASH_ENV", "ENV", "GCONV_PATH",
}

// codeEnvironment picks the variables of CodeEnvironment from env ("K=V"
// entries, the later of duplicates winning, as os/exec does); nil when
// none is set.
func codeEnvironment(env []string) map[string]string {
	var out map[string]string
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !slices.Contains(CodeEnvironment, name) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = value
	}
	return out
}
