package identity

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultVersionTimeout bounds one "X --version" run during runtime detection.
const DefaultVersionTimeout = 3 * time.Second

// LockfileNames are the lockfiles Measure looks for, walking up from the entry's
// directory; the nearest directory wins, and within one directory the earlier
// name in this list.
var LockfileNames = []string{
	"package-lock.json", "pnpm-lock.yaml", "yarn.lock", "bun.lock", "bun.lockb",
	"go.sum", "uv.lock", "poetry.lock", "Cargo.lock", "requirements.txt",
}

// wrapperCommands are launchers that fetch or select the real server
// themselves; Measure records their own file as a wrapper.
var wrapperCommands = map[string]bool{"npx": true, "uvx": true, "bunx": true, "pnpx": true}

// MeasureSpec is what the configuration says about one server launch.
// Command and Args are as configured ("node", "./run.sh", "/abs/bin"); Dir is
// the working directory ("" = the current one); Env holds "K=V" entries added
// on top of os.Environ() (later entries win), used for the PATH lookup and for
// runtime version probes; Extra are the paths the person names (watch entries),
// relative to Dir unless absolute.
//
// Ignore are the server's own ignore patterns (gitignore syntax, relative
// to each measured tree): files they match in a watched directory are data,
// left out of its digest, unless they are code (see [Measurer.DigestTreeData]).
type MeasureSpec struct {
	Label   string
	Command string
	Args    []string
	Dir     string
	Env     []string
	Extra   []string
	Ignore  []string
}

// Measurer measures execution records. It caches file digests by (device,
// inode, size, mtime, ctime) and runtime versions by executable digest, so
// re-measuring an unchanged server reads no file contents; the cache keeps one
// entry (about 100 bytes) per file ever digested. A Measurer is safe
// for concurrent use; the zero value is not usable, use [NewMeasurer].
type Measurer struct {
	logger         *slog.Logger
	now            func() time.Time
	versionTimeout time.Duration

	mu       sync.Mutex
	files    map[string]cachedDigest  // guarded by mu; absolute path -> digest
	runtimes map[string]string        // guarded by mu; kind + "\x00" + digest -> "node v22.14.0"
	opened   map[fileKey][32]byte     // guarded by mu; DigestOpen's cache
	packages map[string]*listings     // guarded by mu; DigestPackage's last listings
	ticks    map[uint64]time.Duration // guarded by mu; device → tick of its change times (0: unknown), see racyWindowOf

	// stampTick returns the tick of the clock that stamps the change
	// times of the file system holding f, false when it is not known
	// (stat_*.go); a test replaces it.
	stampTick func(f *os.File) (time.Duration, bool)
}

// NewMeasurer returns a Measurer that logs to logger (nil discards).
func NewMeasurer(logger *slog.Logger) *Measurer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Measurer{
		logger:         logger,
		now:            time.Now,
		versionTimeout: DefaultVersionTimeout,
		files:          make(map[string]cachedDigest),
		runtimes:       make(map[string]string),
		opened:         make(map[fileKey][32]byte),
		packages:       make(map[string]*listings),
		ticks:          make(map[uint64]time.Duration),
		stampTick:      stampTick,
	}
}

// Measure returns the execution record of launching s as far as it can be
// known before launch (docs/DESIGN.md, "Execution identity"); Epoch, ProcessID,
// StartedAt and Observed are left for the supervisor.
//
//   - The command is resolved with [LookPath] and symlinks, then digested
//     (ResolvedExecutable).
//   - A shebang script is the entry; its interpreter ("#!/usr/bin/env node"
//     resolves node through PATH) is digested and is what runtime detection
//     runs. Shell scripts are also wrappers. A command named like a runtime
//     ("python3") that resolves to a script is a shim: the script is a wrapper
//     and the arguments are read as that runtime's.
//   - Runtimes node, python*, deno, bun, uv/uvx and java get Runtime from
//     "X --version" (bounded by DefaultVersionTimeout; a failure is logged and
//     leaves Runtime empty). Their entry is the first positional argument when
//     it is an existing file, after flags and "run"; none for "python -m",
//     "-c", "node -e", "uv run …". Any other binary is its own entry.
//   - "sh -c …" records the shell as a wrapper; npx, uvx, bunx, pnpx their own
//     file.
//   - The nearest of [LockfileNames] walking up from the entry's directory (or
//     Dir) is digested.
//   - Without Extra, a known launcher's script (nodemon server.js, tsx watch
//     x.ts, uv run x.py, python -m mod found in Dir, npx pkg as npm resolves
//     it: a project's node_modules/.bin, else the npx cache, whose
//     directory is then the package) is the entry, and the launcher's own
//     file a wrapper.
//   - Each Extra path is digested, with [Measurer.DigestTreeData] for
//     directories: data the tree's .gitignore files, [DefaultIgnores] and
//     Ignore mark is left out, code never.
//   - The environment variables that change what code runs
//     ([CodeEnvironment]) are recorded with their values.
//   - Without Extra, an entry script's package (see [PackageDigest]) is
//     digested with [Measurer.DigestPackage].
//
// Errors name the path and the reason; a command that does not resolve wraps
// [ErrCommandNotFound]; ctx ends the measurement between steps.
func (m *Measurer) Measure(ctx context.Context, s MeasureSpec) (Record, error) {
	wd, err := absDir(s.Dir)
	if err != nil {
		return Record{}, err
	}
	env := slices.Concat(os.Environ(), s.Env)
	rec := Record{
		ServerLabel:      s.Label,
		LaunchCommand:    append([]string{s.Command}, s.Args...),
		WorkingDirectory: wd,
	}
	found, err := LookPath(s.Command, wd, env)
	if err != nil {
		return Record{}, err
	}
	exe, err := filepath.EvalSymlinks(found)
	if err != nil {
		return Record{}, fmt.Errorf("resolving %s: %w", found, err)
	}
	exeSum, err := m.DigestFile(exe)
	if err != nil {
		return Record{}, err
	}
	rec.ResolvedExecutable = FileDigest{Path: exe, SHA256: exeSum}

	kind := runtimeKind(s.Command)
	if kind == "" {
		kind = runtimeKind(exe)
	}
	versionExe, versionSum := exe, exeSum
	interp, err := readShebang(exe)
	if err != nil {
		return Record{}, err
	}
	switch {
	case interp != nil && kind != "":
		// A shim: a script standing in for a runtime (pyenv, asdf).
		ip, err := m.resolveInterpreter(interp, exe, wd, env)
		if err != nil {
			return Record{}, err
		}
		rec.Interpreter = &ip
		rec.Wrappers = append(rec.Wrappers, rec.ResolvedExecutable)
		if err := m.entryFromArgs(&rec, kind, s.Args, wd); err != nil {
			return Record{}, err
		}
	case interp != nil:
		ip, err := m.resolveInterpreter(interp, exe, wd, env)
		if err != nil {
			return Record{}, err
		}
		rec.Interpreter = &ip
		rec.Entry, rec.EntryDigest = exe, exeSum
		kind = runtimeKind(interp.program)
		if kind == "" {
			kind = runtimeKind(ip.Path)
		}
		if kind == kindShell {
			rec.Wrappers = append(rec.Wrappers, rec.ResolvedExecutable)
		}
		versionExe, versionSum = ip.Path, ip.SHA256
	case kind != "":
		if err := m.entryFromArgs(&rec, kind, s.Args, wd); err != nil {
			return Record{}, err
		}
	default:
		rec.Entry, rec.EntryDigest = exe, exeSum
	}
	pkgDir := ""
	if len(s.Extra) == 0 {
		// A known launcher (nodemon, tsx watch, uv run, python -m, npx):
		// the script it runs is the entry, measured with its package and
		// watched; the launcher's own file stays measured as a wrapper.
		script := launchedScript(s.Command, s.Args, kind, rec.Entry, wd)
		if script == "" && filepath.Base(s.Command) == "npx" {
			script, pkgDir = npxScript(s.Args, wd, env)
		}
		if script != "" {
			real, err := filepath.EvalSymlinks(script)
			if err != nil {
				return Record{}, fmt.Errorf("resolving entry %s: %w", script, err)
			}
			sum, err := m.DigestFile(real)
			if err != nil {
				return Record{}, err
			}
			if rec.Entry != "" && !slices.ContainsFunc(rec.Wrappers, func(w FileDigest) bool { return w.Path == rec.Entry }) {
				rec.Wrappers = append(rec.Wrappers, FileDigest{Path: rec.Entry, SHA256: rec.EntryDigest})
			}
			rec.Entry, rec.EntryDigest = real, sum
		}
	}
	if wrapperCommands[filepath.Base(s.Command)] && !slices.Contains(rec.Wrappers, rec.ResolvedExecutable) {
		rec.Wrappers = append(rec.Wrappers, rec.ResolvedExecutable)
	}
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	if versioned[kind] {
		rec.Runtime = m.runtimeVersion(ctx, kind, versionExe, versionSum, wd, env)
	}

	start := wd
	if rec.Entry != "" {
		start = filepath.Dir(rec.Entry)
	}
	if lock := findLockfile(start); lock != "" {
		sum, err := m.DigestFile(lock)
		if err != nil {
			return Record{}, err
		}
		rec.Lockfile, rec.LockfileDigest = lock, sum
	}

	if len(s.Extra) == 0 && rec.Entry != "" && rec.Entry != rec.ResolvedExecutable.Path {
		// No watch path: the entry's package is measured, so that an
		// edited sibling module or dependency is new code too.
		dir := pkgDir
		if dir == "" {
			dir = packageDir(rec.Entry)
		}
		if dir != "" {
			pd, err := m.DigestPackage(dir)
			if err != nil {
				return Record{}, err
			}
			rec.Package = &pd
		}
	}
	rec.Environment = codeEnvironment(env)
	if len(s.Ignore) > 0 {
		rec.Ignore = slices.Clone(s.Ignore)
	}
	// Files measured by name are code in a watched tree whatever an
	// ignore pattern says.
	code := []string{rec.ResolvedExecutable.Path, rec.Entry, rec.Lockfile}
	if rec.Interpreter != nil {
		code = append(code, rec.Interpreter.Path)
	}
	for _, w := range rec.Wrappers {
		code = append(code, w.Path)
	}
	for _, e := range s.Extra {
		if err := ctx.Err(); err != nil {
			return Record{}, err
		}
		p := e
		if !filepath.IsAbs(p) {
			p = filepath.Join(wd, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return Record{}, fmt.Errorf("watch path %s: %w", e, err)
		}
		var sum string
		if fi.IsDir() {
			sum, err = m.DigestTreeData(p, s.Ignore, code)
		} else {
			sum, err = m.DigestFile(p)
		}
		if err != nil {
			return Record{}, fmt.Errorf("watch path %s: %w", e, err)
		}
		if rec.ExtraDigests == nil {
			rec.ExtraDigests = make(map[string]string, len(s.Extra))
		}
		rec.ExtraDigests[e] = sum
	}
	return rec, nil
}

// entryFromArgs sets Entry from a runtime's arguments; a shell's script, or the
// shell itself when it runs "-c", is also a wrapper.
func (m *Measurer) entryFromArgs(rec *Record, kind string, args []string, wd string) error {
	entry := entryArg(kind, args, wd)
	if entry == "" {
		if kind == kindShell && !slices.Contains(rec.Wrappers, rec.ResolvedExecutable) {
			rec.Wrappers = append(rec.Wrappers, rec.ResolvedExecutable)
		}
		return nil
	}
	real, err := filepath.EvalSymlinks(entry)
	if err != nil {
		return fmt.Errorf("resolving entry %s: %w", entry, err)
	}
	sum, err := m.DigestFile(real)
	if err != nil {
		return err
	}
	rec.Entry, rec.EntryDigest = real, sum
	if kind == kindShell {
		rec.Wrappers = append(rec.Wrappers, FileDigest{Path: real, SHA256: sum})
	}
	return nil
}

// shebang is the parsed "#!" line of a script.
type shebang struct {
	path    string // interpreter as written
	arg     string // the optional single argument (Linux passes the rest of the line as one)
	program string // the program name: path, or for env the program it runs
}

// shebangMax is how much of a script the kernel reads for "#!" (Linux 5.1+).
const shebangMax = 256

// readShebang returns the script's shebang, or nil when exe is not a script.
func readShebang(exe string) (*shebang, error) {
	f, err := os.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", exe, err)
	}
	defer f.Close()
	buf := make([]byte, shebangMax)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: %w", exe, err)
	}
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return nil, nil
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	text := strings.TrimSpace(string(line))
	if text == "" {
		return nil, fmt.Errorf("reading %s: empty #! line", exe)
	}
	sb := &shebang{path: text}
	if i := strings.IndexAny(text, " \t"); i >= 0 {
		sb.path, sb.arg = text[:i], strings.TrimSpace(text[i+1:])
	}
	sb.program = sb.path
	if filepath.Base(sb.path) == "env" {
		sb.program = envProgram(sb.arg)
		if sb.program == "" {
			return nil, fmt.Errorf("reading %s: no program after %s in #! line", exe, sb.path)
		}
	}
	return sb, nil
}

// envProgram returns the program that "env ARG" runs: the first word that is
// not an option (with -u/-C taking a value) and not a NAME=VALUE assignment.
func envProgram(arg string) string {
	fields := strings.Fields(arg)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		switch {
		case f == "-u" || f == "-C" || f == "--unset" || f == "--chdir":
			i++
		case strings.HasPrefix(f, "-"):
		case strings.Contains(f, "="):
		default:
			return f
		}
	}
	return ""
}

// resolveInterpreter resolves and digests a script's interpreter: an env
// program through PATH, a path as is (relative to wd).
func (m *Measurer) resolveInterpreter(sb *shebang, script, wd string, env []string) (FileDigest, error) {
	var p string
	if sb.program != sb.path {
		found, err := LookPath(sb.program, wd, env)
		if err != nil {
			return FileDigest{}, fmt.Errorf("interpreter of %s: %w", script, err)
		}
		p = found
	} else {
		p = sb.path
		if !filepath.IsAbs(p) {
			p = filepath.Join(wd, p)
		}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return FileDigest{}, fmt.Errorf("interpreter %s of %s: %w", sb.path, script, err)
	}
	sum, err := m.DigestFile(real)
	if err != nil {
		return FileDigest{}, fmt.Errorf("interpreter of %s: %w", script, err)
	}
	return FileDigest{Path: real, SHA256: sum}, nil
}

// Runtime kinds.
const (
	kindNode   = "node"
	kindPython = "python"
	kindDeno   = "deno"
	kindBun    = "bun"
	kindUV     = "uv"
	kindJava   = "java"
	kindShell  = "shell"
)

// versioned are the kinds whose version Measure asks for.
var versioned = map[string]bool{kindNode: true, kindPython: true, kindDeno: true, kindBun: true, kindUV: true, kindJava: true}

// runtimeKind classifies an executable by its file name; "" for anything else.
func runtimeKind(name string) string {
	base := filepath.Base(name)
	switch base {
	case "node", "nodejs":
		return kindNode
	case "deno":
		return kindDeno
	case "bun":
		return kindBun
	case "uv", "uvx":
		return kindUV
	case "java":
		return kindJava
	case "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash":
		return kindShell
	}
	if rest, ok := strings.CutPrefix(base, "python"); ok && strings.Trim(rest, "0123456789.") == "" {
		return kindPython
	}
	return ""
}

// argRules describe how a runtime's command line names its script.
type argRules struct {
	stop         map[string]bool // flags after which no script file follows (code or module instead)
	value        map[string]bool // flags that take the next argument
	entryFlag    map[string]bool // flags whose value is the entry (java -jar)
	sub          map[string]bool // subcommands skipped before the script (deno run)
	clusterStop  string          // short-option letters that stop (python -m/-c, sh -c), also in clusters like -um
	clusterValue string          // short-option letters that take a value (python -W)
}

func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
}

var rulesByKind = map[string]argRules{
	kindNode: {
		stop:  set("-e", "--eval", "-p", "--print", "-i", "--interactive"),
		value: set("-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions", "--env-file", "--title", "--input-type", "--inspect-port", "--watch-path"),
	},
	kindPython: {
		value:        set("--check-hash-based-pycs"),
		clusterStop:  "mc",
		clusterValue: "WXQ",
	},
	kindDeno: {
		stop:  set("--eval"),
		value: set("-c", "--config", "--import-map", "--lock", "--cert", "--location", "--seed", "--v8-flags", "--env-file"),
		sub:   set("run", "serve"),
	},
	kindBun: {
		stop:  set("-e", "--eval", "-p", "--print"),
		value: set("--cwd", "-r", "--preload", "--env-file", "-c", "--config"),
		sub:   set("run"),
	},
	kindJava: {
		stop:      set("-m", "--module"),
		value:     set("-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules"),
		entryFlag: set("-jar"),
	},
	kindShell: {
		value:        set("-o", "+o"),
		clusterStop:  "c",
		clusterValue: "o",
	},
}

// entryArg returns the absolute path of the script a runtime's arguments
// name, or "" when there is none (a module, inline code, a subcommand, or a
// first positional argument that is not an existing regular file). kind uv
// never has one: "uv run script.py" is resolved by uv itself.
func entryArg(kind string, args []string, dir string) string {
	p := entryWord(kind, args)
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p
	}
	return ""
}

// EntryArg returns the argument a runtime's command line names as its
// script (node server.mjs, python3 -u app.py), whether or not that file
// exists, or "" when the command is not a known runtime or names no script.
func EntryArg(command string, args []string) string {
	return entryWord(runtimeKind(command), args)
}

// entryWord returns the word of args a runtime of kind takes as its
// script, as written, or "" when there is none (a module, inline code, a
// subcommand).
func entryWord(kind string, args []string) string {
	r, ok := rulesByKind[kind]
	if !ok {
		return ""
	}
	subSkipped := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		if len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			if !subSkipped && r.sub[a] {
				subSkipped = true
				continue
			}
			return a
		}
		name, val, hasVal := strings.Cut(a, "=")
		switch {
		case r.entryFlag[name]:
			if hasVal {
				return val
			}
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		case r.stop[name]:
			return ""
		case r.value[name]:
			if !hasVal {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, "--") || (r.clusterStop == "" && r.clusterValue == "") {
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if strings.IndexByte(r.clusterStop, c) >= 0 {
				return ""
			}
			if strings.IndexByte(r.clusterValue, c) >= 0 {
				if j == len(a)-1 {
					i++ // the value is the next argument
				}
				break
			}
		}
	}
	return ""
}

// findLockfile returns the nearest lockfile walking up from dir, or "".
func findLockfile(dir string) string {
	for {
		for _, name := range LockfileNames {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// versionOutputMax bounds what a version probe may print.
const versionOutputMax = 4096

// runtimeVersion returns "<kind> <version>" from "exe --version", cached by
// kind and executable digest; "" when the probe fails.
func (m *Measurer) runtimeVersion(ctx context.Context, kind, exe, sum, dir string, env []string) string {
	key := kind + "\x00" + sum
	m.mu.Lock()
	v, ok := m.runtimes[key]
	m.mu.Unlock()
	if ok {
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, m.versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "--version")
	cmd.Dir, cmd.Env = dir, env
	out := &capped{max: versionOutputMax}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 500 * time.Millisecond
	if err := cmd.Run(); err != nil {
		m.logger.Warn("runtime version probe failed", "kind", kind, "exe", exe, "err", err)
		return ""
	}
	v = parseVersion(kind, out.buf.String())
	if v == "" {
		m.logger.Warn("runtime version probe printed nothing", "kind", kind, "exe", exe)
		return ""
	}
	m.mu.Lock()
	m.runtimes[key] = v
	m.mu.Unlock()
	return v
}

// parseVersion turns "--version" output into "<kind> <version>": the first
// word of the first non-empty line that starts with a digit or "v" and a digit
// ("v22.14.0", "Python 3.12.3" -> "3.12.3", "openjdk 21.0.5 2024-10-15" ->
// "21.0.5"), else that whole line cut to 64 bytes.
func parseVersion(kind, out string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		for _, w := range strings.Fields(line) {
			w = strings.TrimRight(w, ",;")
			d := strings.TrimPrefix(w, "v")
			if d != "" && d[0] >= '0' && d[0] <= '9' {
				return kind + " " + w
			}
		}
		if len(line) > 64 {
			line = line[:64]
		}
		return kind + " " + strings.ToValidUTF8(line, "?")
	}
	return ""
}

// capped is a writer that keeps the first max bytes and drops the rest.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// ScriptOf returns the script that a process running executable exe with
// arguments args (args[0] is the program name, as in /proc/PID/cmdline) in
// working directory cwd runs, as an absolute path with symlinks resolved:
// the entry of a runtime (node, python*, deno, bun, java -jar) or the file a
// shell runs; "" for any other program, for inline code ("-c", "-e") or a
// module ("-m"), and when the file does not exist.
func ScriptOf(exe string, args []string, cwd string) string {
	kind := runtimeKind(exe)
	if kind == "" && len(args) > 0 {
		kind = runtimeKind(args[0])
	}
	if kind == "" || len(args) == 0 {
		return ""
	}
	p := entryArg(kind, args[1:], cwd)
	if p == "" {
		return ""
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return real
}
