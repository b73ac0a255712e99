package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/secrets"
	"github.com/portcullis/portcullis/platform"
)

// newSecretStore returns the credential store the creds commands use: the
// system's (Keychain, Secret Service). Tests replace it with a secrets.Memory.
var newSecretStore = platform.NewSecretStore

// maxSecretSize bounds a secret read by `creds set`, in bytes.
const maxSecretSize = 64 << 10

// Secret states shown by `creds list`.
const (
	secretStored      = "stored"      // a non-empty value is in the store
	secretMissing     = "missing"     // nothing is stored for the scope
	secretLocked      = "locked"      // the store is locked
	secretUnavailable = "unavailable" // there is no store to ask
	secretEmpty       = "empty"       // the stored value is empty and will not be used
	secretError       = "error"       // another failure; see the note on stderr
)

func (a *App) runCreds(args []string) error {
	if len(args) == 0 {
		return usagef("creds needs a subcommand: set, list or remove")
	}
	switch args[0] {
	case "set":
		return a.credsSet(args[1:])
	case "list":
		return a.credsList(args[1:])
	case "remove":
		return a.credsRemove(args[1:])
	}
	return usagef("unknown creds subcommand %q (set, list, remove)", args[0])
}

// credsSet implements `creds set SCOPE [--env VAR | --meta] [--ask-every-use]`:
// the secret comes from stdin, goes to the credential store, and the scope's
// settings go to the configuration file. Without --env or --meta an existing
// scope keeps its settings (the secret is replaced, --ask-every-use can be
// turned on); a new scope needs one of them.
func (a *App) credsSet(args []string) error {
	const synopsis = "creds set SCOPE [--env VAR | --meta] [--ask-every-use] (the secret is read from stdin)"
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("creds set needs a credential scope first: %s", synopsis)
	}
	scope := args[0]
	o := credsSetFlags()
	fs, envVar, meta, ask := o.fs, o.env, o.meta, o.ask
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("creds set %s: unexpected argument %q: %s", scope, fs.Arg(0), synopsis)
	}
	if err := secrets.CheckScope(scope); err != nil {
		return usagef("creds set: %v", err)
	}
	if *envVar != "" && *meta {
		return usagef("creds set %s: --env and --meta exclude each other", scope)
	}
	if *envVar != "" && !config.ValidEnvName(*envVar) {
		return usagef("creds set %s: --env %q is not a valid environment variable name: use letters, digits and '_', not starting with a digit", scope, *envVar)
	}

	cfg, err := a.loadConfig()
	if err != nil {
		return err
	}
	cred, exists := cfg.Credentials[scope]
	switch {
	case *envVar != "":
		cred = config.Credential{Inject: config.InjectEnv, EnvVar: *envVar, AskEveryUse: *ask}
	case *meta:
		cred = config.Credential{Inject: config.InjectMeta, AskEveryUse: *ask}
	case exists:
		cred.AskEveryUse = cred.AskEveryUse || *ask
	default:
		return usagef("creds set %s: a new credential scope needs --env VAR (inject into the server's environment) or --meta (inject into each tools/call's _meta)", scope)
	}
	if cfg.Credentials == nil {
		cfg.Credentials = make(map[string]config.Credential)
	}
	cfg.Credentials[scope] = cred
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("creds set %s: the configuration would be invalid, nothing was changed: %w", scope, err)
	}

	secret, err := a.readSecret(scope)
	if err != nil {
		return err
	}
	defer clear(secret)
	if err := newSecretStore().Set(scope, secret); err != nil {
		return storeError(err, "nothing was changed")
	}
	cfg, err = a.editConfig(func(c *config.Config) error {
		if c.Credentials == nil {
			c.Credentials = make(map[string]config.Credential)
		}
		c.Credentials[scope] = cred
		return nil
	})
	if err != nil {
		return fmt.Errorf("the secret of %s is stored, but recording the scope failed: %w", scope, err)
	}
	fmt.Fprintf(a.Stdout, "Stored the secret of %s in the credential store, and its settings in %s: %s.\n",
		scope, a.Dirs.ConfigFile(), describeCredential(cred))
	if users := serversUsing(cfg, scope); len(users) == 0 {
		fmt.Fprintf(a.Stdout, "No server uses it yet: give it to one with portcullis servers cred LABEL add %s (or --cred %s when adding a new server).\n", scope, scope)
	} else {
		fmt.Fprintf(a.Stdout, "Used by: %s. Running servers get it at their next approved launch.\n", strings.Join(users, ", "))
	}
	return nil
}

// describeCredential says in words how a scope's secret reaches a server.
func describeCredential(c config.Credential) string {
	var s string
	switch c.Inject {
	case config.InjectEnv:
		s = "injected as $" + c.EnvVar + " into the environment of approved server processes"
	case config.InjectMeta:
		s = "injected into params._meta of approved tools/call requests"
	default:
		s = "injected by " + c.Inject
	}
	if c.AskEveryUse {
		s += ", with approval on every use"
		if c.Inject == config.InjectEnv {
			s += " (every launch, and every tools/call of a tool whose policy is approve)"
		}
	}
	return s
}

// readSecret reads the secret of scope from stdin: without echo from a
// terminal (one line), otherwise everything up to EOF with one trailing
// newline ("\n" or "\r\n") removed. It refuses an empty secret and one larger
// than maxSecretSize. Its errors never contain what was read.
func (a *App) readSecret(scope string) ([]byte, error) {
	var secret []byte
	if f, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(a.Stderr, "Secret for %s (typing is not shown): ", scope)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.Stderr)
		if err != nil {
			return nil, fmt.Errorf("creds set %s: reading the secret from the terminal: %w", scope, err)
		}
		secret = b
	} else {
		b, err := io.ReadAll(io.LimitReader(a.Stdin, maxSecretSize+1))
		if err != nil {
			clear(b)
			return nil, fmt.Errorf("creds set %s: reading the secret from stdin: %w", scope, err)
		}
		if len(b) > maxSecretSize {
			clear(b)
			return nil, fmt.Errorf("creds set %s: the secret on stdin is longer than %d bytes; nothing was changed", scope, maxSecretSize)
		}
		b = bytes.TrimSuffix(b, []byte("\n"))
		secret = bytes.TrimSuffix(b, []byte("\r"))
	}
	if err := secrets.CheckSecret(secret); err != nil {
		return nil, fmt.Errorf("creds set %s: %w: nothing was changed (pipe the secret on stdin, for example: portcullis creds set %s < token-file)", scope, err, scope)
	}
	return secret, nil
}

// storeError adds the store's advice and what happened to the change to err.
func storeError(err error, outcome string) error {
	if hint := secrets.Hint(err); hint != "" {
		return fmt.Errorf("%w\n%s; %s", err, outcome, hint)
	}
	return fmt.Errorf("%w\n%s", err, outcome)
}

// serversUsing returns the sorted labels of the servers that list scope.
func serversUsing(cfg *config.Config, scope string) []string {
	var users []string
	for label, s := range cfg.Servers {
		if slices.Contains(s.Credentials, scope) {
			users = append(users, label)
		}
	}
	slices.Sort(users)
	return users
}

// credEntry is one line of `creds list`, and its JSON form.
type credEntry struct {
	Scope       string   `json:"scope"`
	Inject      string   `json:"inject"`
	EnvVar      string   `json:"envVar,omitempty"`
	AskEveryUse bool     `json:"askEveryUse"`
	Secret      string   `json:"secret"`
	Servers     []string `json:"servers"`
}

// secretState asks store whether scope has a usable secret, without keeping
// the value; err is set for states other than stored and missing.
func secretState(store secrets.Store, scope string) (state string, err error) {
	v, err := store.Get(scope)
	clear(v)
	switch {
	case err == nil:
		return secretStored, nil
	case errors.Is(err, secrets.ErrNotFound):
		return secretMissing, nil
	case errors.Is(err, secrets.ErrLocked):
		return secretLocked, err
	case errors.Is(err, secrets.ErrUnavailable):
		return secretUnavailable, err
	case errors.Is(err, secrets.ErrEmpty):
		return secretEmpty, err
	}
	return secretError, err
}

// credsList implements `creds list [--json]`: the scopes of the configuration
// with their settings, the servers using them, and whether the credential
// store holds a secret for each — never a value.
func (a *App) credsList(args []string) error {
	fs, asJSON := jsonFlags("creds list", "print the scopes as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("creds list takes no arguments")
	}
	cfg, err := a.readConfig()
	if err != nil {
		return err
	}
	store := newSecretStore()
	entries := []credEntry{}
	var problems []error
	for _, scope := range sortedKeys(cfg.Credentials) {
		c := cfg.Credentials[scope]
		state, err := secretState(store, scope)
		if err != nil {
			problems = append(problems, err)
		}
		users := serversUsing(cfg, scope)
		if users == nil {
			users = []string{}
		}
		entries = append(entries, credEntry{Scope: scope, Inject: c.Inject, EnvVar: c.EnvVar,
			AskEveryUse: c.AskEveryUse, Secret: state, Servers: users})
	}
	if *asJSON {
		if err := writeJSON(a.Stdout, entries); err != nil {
			return err
		}
	} else if len(entries) == 0 {
		fmt.Fprintf(a.Stdout, "No credential scopes in %s.\nAdd one with: portcullis creds set SCOPE --env VAR < token-file\n", a.Dirs.ConfigFile())
	} else {
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SCOPE\tINJECT\tENV VAR\tASK EVERY USE\tSECRET\tSERVERS")
		for _, e := range entries {
			ask := "no"
			if e.AskEveryUse {
				ask = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Scope, e.Inject, orDash(e.EnvVar), ask, e.Secret, orDash(strings.Join(e.Servers, ",")))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	// Say once per distinct advice what is wrong with the store, on stderr so
	// that --json output stays parseable.
	seen := map[string]bool{}
	for _, err := range problems {
		hint := secrets.Hint(err)
		if seen[hint] && hint != "" {
			continue
		}
		seen[hint] = true
		fmt.Fprintf(a.Stderr, "note: %v\n", err)
		if hint != "" {
			fmt.Fprintf(a.Stderr, "      %s\n", hint)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// credsRemove implements `creds remove SCOPE`: it deletes the secret from the
// credential store and the scope from the configuration. It refuses while a
// server lists the scope, and changes nothing when the store cannot be asked.
func (a *App) credsRemove(args []string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usagef("creds remove needs exactly one credential scope")
	}
	scope := args[0]
	if err := secrets.CheckScope(scope); err != nil {
		return usagef("creds remove: %v", err)
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return err
	}
	if users := serversUsing(cfg, scope); len(users) > 0 {
		return fmt.Errorf("credential scope %s is still used by %s: take it away first with portcullis servers cred LABEL remove %s; nothing was changed",
			scope, strings.Join(users, ", "), scope)
	}
	_, inConfig := cfg.Credentials[scope]
	deleted := true
	if err := newSecretStore().Delete(scope); errors.Is(err, secrets.ErrNotFound) {
		deleted = false
	} else if err != nil {
		return storeError(err, "nothing was changed")
	}
	if !inConfig && !deleted {
		return fmt.Errorf("no credential scope %s in %s, and no secret stored for it", scope, a.Dirs.ConfigFile())
	}
	if inConfig {
		if _, err := a.editConfig(func(c *config.Config) error { delete(c.Credentials, scope); return nil }); err != nil {
			return fmt.Errorf("the secret of %s is deleted, but removing the scope from the configuration failed: %w", scope, err)
		}
	}
	switch {
	case deleted && inConfig:
		fmt.Fprintf(a.Stdout, "Removed %s: its secret from the credential store and its settings from %s.\n", scope, a.Dirs.ConfigFile())
	case deleted:
		fmt.Fprintf(a.Stdout, "Removed the secret of %s from the credential store (the scope was not in %s).\n", scope, a.Dirs.ConfigFile())
	default:
		fmt.Fprintf(a.Stdout, "Removed %s from %s (no secret was stored for it).\n", scope, a.Dirs.ConfigFile())
	}
	return nil
}
