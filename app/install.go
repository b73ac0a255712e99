package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/install"
	"github.com/portcullis/portcullis/core/paths"
	"github.com/portcullis/portcullis/core/secrets"
	"github.com/portcullis/portcullis/internal/front"
	"github.com/portcullis/portcullis/platform"
)

// installSecretStore returns the keychain that install, import and uninstall
// move secrets into and out of (tests replace it). When the system has no
// keychain at all (no Secret Service on the session bus, a build without
// Keychain access) it returns nil: install then leaves entries whose env
// holds a secret as they are, and says why, instead of refusing the whole
// file. A locked keychain is a keychain: its errors say to unlock it.
var installSecretStore = func() (install.SecretStore, error) {
	s := platform.NewSecretStore()
	if err := s.Exists(installProbeScope); errors.Is(err, secrets.ErrUnavailable) {
		return nil, nil
	}
	return s, nil
}

// installProbeScope is the scope looked up (never stored) to learn whether a
// keychain answers at all.
const installProbeScope = "portcullis-install-probe"

// runInstall is `portcullis install AGENT [--dry-run] [--scope user|project]
// [--servers a,b] [--plain-env VAR,…]`.
func (a *App) runInstall(ctx context.Context, args []string) error {
	return a.runInstallOp(ctx, "install", args)
}

// runImport is `portcullis import AGENT [--dry-run] [--scope user|project]
// [--servers a,b] [--plain-env VAR,…]`: like install, without changing the
// agent's file.
func (a *App) runImport(ctx context.Context, args []string) error {
	return a.runInstallOp(ctx, "import", args)
}

// runUninstall is `portcullis uninstall AGENT [--dry-run] [--scope user|project]
// [--servers a,b] [--restore-secrets]`.
func (a *App) runUninstall(ctx context.Context, args []string) error {
	return a.runInstallOp(ctx, "uninstall", args)
}

const installUsage = "%s needs an agent: %s AGENT [--dry-run] [--scope user|project] [--servers NAME,…]%s (agents: claude-desktop, claude-code, cursor, vscode, gemini-cli, codex)"

func (a *App) runInstallOp(_ context.Context, op string, args []string) error {
	o := installFlags(op)
	fs, dryRun, scope, servers, plainEnv, restore := o.fs, o.dryRun, o.scope, o.servers, o.plainEnv, o.restore
	extra := " [--plain-env VAR,…]"
	if op == "uninstall" {
		extra = " [--restore-secrets]"
	}
	// The agent may come first (`install cursor --dry-run`) or after the flags.
	var agent string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		agent, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if agent == "" && fs.NArg() > 0 {
		agent = fs.Arg(0)
		if err := parseFlags(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	if agent == "" || fs.NArg() > 0 {
		return usagef(installUsage, op, op, extra)
	}
	target, err := install.Locate(install.Agent(agent), install.Scope(*scope), installEnv())
	if errors.Is(err, install.ErrUnknownAgent) || errors.Is(err, install.ErrScope) {
		return usagef("%s: %v", op, err)
	}
	if err != nil {
		return err
	}
	store, err := installSecretStore()
	if err != nil {
		return fmt.Errorf("opening the keychain: %w", err)
	}
	exe, err := portcullisExecutable()
	if err != nil {
		return err
	}
	opts := install.Options{
		Target:     target,
		ConfigFile: a.Dirs.ConfigFile(),
		StateDir:   a.Dirs.State,
		Exe:        exe,
		Servers:    splitList(*servers),
		Store:      store,
		DryRun:     *dryRun,
		Logger:     a.logger(op),
	}
	// Through a running daemon: the person's change, not an outside edit.
	opts.Save = func(c *config.Config) error {
		_, err := a.editConfig(func(cur *config.Config) error { *cur = *c.Clone(); return nil })
		return err
	}
	if home := os.Getenv(paths.EnvHome); home != "" {
		// The agent launches `portcullis connect` without this shell's
		// environment: the entry must carry the data directory itself.
		opts.Home = filepath.Clean(home)
	}
	if plainEnv != nil {
		opts.PlainEnv = splitList(*plainEnv)
	}
	if restore != nil {
		opts.RestoreSecrets = *restore
		if *restore && !*dryRun {
			// Secrets leave the keychain for a plain file: the person's.
			if err := a.requirePerson("uninstall --restore-secrets", "put the secrets of "+agent+"'s servers back into its configuration"); err != nil {
				return err
			}
		}
	}
	if op == "install" && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		fmt.Fprintf(a.Stderr, "portcullis: warning: %s looks like a temporary `go run` binary; agents will not find it later\n", exe)
	}
	var rep *install.Report
	switch op {
	case "install":
		rep, err = install.Install(opts)
	case "import":
		rep, err = install.Import(opts)
	default:
		rep, err = install.Uninstall(opts)
	}
	if rep != nil {
		if werr := rep.Write(a.Stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if op == "install" && err == nil {
		// The agent's calls now go through Portcullis: say whether the
		// person's approvals of them are OS-authenticated.
		if auth := a.authStatusHere(); !auth.OSAuthenticated {
			fmt.Fprintf(a.Stdout, "note: %s\n", authLine(auth))
		}
	}
	if errors.Is(err, config.ErrInvalid) {
		return configError(err, againCommand)
	}
	return err
}

// installEnv describes this machine for install.Locate.
func installEnv() install.Env {
	home, _ := os.UserHomeDir()
	wd, _ := os.Getwd()
	return install.Env{
		GOOS:            runtime.GOOS,
		Home:            home,
		XDGConfigHome:   os.Getenv("XDG_CONFIG_HOME"),
		ClaudeConfigDir: os.Getenv("CLAUDE_CONFIG_DIR"),
		CodexHome:       os.Getenv("CODEX_HOME"),
		Dir:             wd,
	}
}

// portcullisExecutable returns the absolute path agents should launch: the
// front (`portcullis`, which starts in a few milliseconds) beside this
// executable with symbolic links resolved, or on macOS the one inside an
// installed Portcullis.app when this binary is not already in a bundle.
func portcullisExecutable() (string, error) {
	self, err := os.Executable()
	if err == nil {
		self, err = filepath.EvalSymlinks(self)
	}
	if err != nil {
		return "", fmt.Errorf("finding the portcullis executable: %w", err)
	}
	self = front.FrontOf(self)
	var bundles []string
	if runtime.GOOS == "darwin" {
		home, _ := os.UserHomeDir()
		for _, dir := range []string{"/Applications", filepath.Join(home, "Applications")} {
			for _, name := range []string{"portcullis", "Portcullis"} {
				bundles = append(bundles, filepath.Join(dir, "Portcullis.app", "Contents", "MacOS", name))
			}
		}
	}
	return install.ResolveExecutable(self, bundles, func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
	}), nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
