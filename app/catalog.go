package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/textsafe"
)

// runRestart asks the daemon to replace the server process of every agent
// run of a label with a new epoch.
func (a *App) runRestart(args []string) error {
	if len(args) != 1 {
		return usagef("restart needs exactly one server label")
	}
	label := args[0]
	cfg, cfgErr := a.loadConfig()
	if cfgErr == nil {
		if _, ok := cfg.Servers[label]; !ok {
			return fmt.Errorf("no server labelled %q is configured in %s", label, a.Dirs.ConfigFile())
		}
	}
	timeout := daemon.RestartTimeout(config.Settings{})
	if cfgErr == nil {
		timeout = daemon.RestartTimeout(cfg.Settings)
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpRestart, Label: label}, timeout)
	var re *control.RefusedError
	switch {
	case errors.Is(err, control.ErrNoDaemon):
		fmt.Fprintf(a.Stdout, "No daemon is running, so no server of %s runs and nothing was restarted. It starts, with the current configuration, when an agent connects: reconnect %s in the agent (Claude Code: /mcp).\n", label, label)
		return nil
	case errors.As(err, &re) && re.Reply.Code == "no_runs":
		fmt.Fprintf(a.Stdout, "No agent run of %s is connected (a run that reported a failure ends when the agent disconnects), so nothing was restarted. The server starts, with the current configuration, when an agent connects: reconnect %s in the agent (Claude Code: /mcp).\n", label, label)
		return nil
	case err != nil:
		return daemonError(err)
	}
	var n struct {
		Restarted int                     `json:"restarted"`
		Results   []gateway.RestartResult `json:"results"`
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("reading the daemon's answer: %w", err)
	}
	fmt.Fprintf(a.Stdout, "Restart of %s, %d agent run(s) (each waited for until its new epoch answered or failed):\n", label, n.Restarted)
	var failed []string
	for _, r := range n.Results {
		if r.Error == "" {
			fmt.Fprintf(a.Stdout, "  run %s: new epoch %s\n", r.Run, r.Epoch)
			continue
		}
		line := fmt.Sprintf("run %s: %s", r.Run, textsafe.Line(r.Error))
		if r.Kept != "" {
			line += fmt.Sprintf(" (epoch %s keeps serving)", r.Kept)
		}
		fmt.Fprintf(a.Stdout, "  %s\n", line)
		failed = append(failed, line)
	}
	if cfgErr == nil {
		fmt.Fprintln(a.Stdout, a.restartApprovals(cfg, label))
	}
	if len(failed) > 0 {
		return fmt.Errorf("restart of %s failed for %d of %d agent run(s): %s; fix the cause and run `portcullis restart %s` again", label, len(failed), n.Restarted, strings.Join(failed, "; "), label)
	}
	return nil
}

// restartApprovals says what a new epoch of label asks a person, as far as
// the configuration and the latest stored catalog revision tell.
func (a *App) restartApprovals(cfg *config.Config, label string) string {
	srv := cfg.Servers[label]
	var approve []string
	known := false
	if store, err := a.openCatalogs(); err == nil {
		if cur, ok := store.Current(label); ok {
			known = true
			for _, name := range cur.Names() {
				if srv.Policy(name) == config.PolicyApprove {
					approve = append(approve, name)
				}
			}
		}
	}
	var s string
	switch {
	case !known:
		s = "Grants end with the old epoch: tools with policy approve (the default) ask for approval again at their next call."
	case len(approve) == 0:
		s = "Every tool of its latest catalog revision has policy allow or deny, so calls need no new approval."
	default:
		s = fmt.Sprintf("Grants end with the old epoch: %s (policy approve) ask for approval again at their next call.", strings.Join(approve, ", "))
	}
	var every []string
	env := false
	for _, scope := range srv.Credentials {
		if c := cfg.Credentials[scope]; c.Inject == config.InjectEnv {
			env = true
			if c.AskEveryUse {
				every = append(every, scope)
			}
		}
	}
	switch {
	case env && len(every) > 0:
		s += fmt.Sprintf(" Its env credentials %s ask on every use: the relaunch waits for your approval.", strings.Join(every, ", "))
	case env:
		s += " Its env credentials reach a relaunch of the same build without asking; a build whose measured files changed (executable, entry, lockfile, watched paths: see portcullis status) waits for approval first."
	}
	return s
}

func (a *App) openCatalogs() (*catalog.Store, error) {
	return catalog.OpenStore(filepath.Join(a.Dirs.State, "catalog"))
}

const catalogUsage = "catalog needs a subcommand and a label: catalog show LABEL [REV] [--json] | catalog diff LABEL [FROM TO] [--json]"

// runCatalog prints catalog revisions and diffs from the catalog store, as
// text for a person or, with --json, as JSON.
//
//	portcullis catalog show LABEL [REV] [--json]
//	portcullis catalog diff LABEL [FROM TO] [--json]   (default: previous → current)
func (a *App) runCatalog(args []string) error {
	if len(args) < 1 {
		return usagef("%s", catalogUsage)
	}
	sub := args[0]
	if sub != "show" && sub != "diff" {
		return usagef("unknown catalog subcommand %q (show, diff)", sub)
	}
	fs, asJSON := jsonFlags("catalog "+sub, map[string]string{"show": "print the catalog revision as JSON", "diff": "print the classified diff as JSON"}[sub])
	// Flags may come anywhere: collect the words that are not flags.
	var words []string
	rest := args[1:]
	for len(rest) > 0 {
		if err := parseFlags(fs, rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(words) == 0 {
		return usagef("%s", catalogUsage)
	}
	label, words := words[0], words[1:]
	store, err := a.openCatalogs()
	if err != nil {
		return err
	}
	revs := store.Revisions(label)
	if len(revs) == 0 {
		if cfg, err := a.loadConfig(); err == nil {
			if _, ok := cfg.Servers[label]; !ok {
				return fmt.Errorf("no server labelled %q in %s (servers: %s), and no catalog revision recorded for that label", label, a.Dirs.ConfigFile(), orDash(strings.Join(sortedKeys(cfg.Servers), ", ")))
			}
		}
		return fmt.Errorf("no catalog revision of %q yet: revisions are recorded once an agent has connected to it", label)
	}
	get := func(s string) (catalog.Catalog, error) {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return catalog.Catalog{}, usagef("%q is not a revision number", s)
		}
		c, ok := store.Get(label, n)
		if !ok {
			return catalog.Catalog{}, fmt.Errorf("revision %d of %q is not stored (stored: %v)", n, label, revs)
		}
		return c, nil
	}
	switch sub {
	case "show":
		c, _ := store.Current(label)
		if len(words) == 1 {
			if c, err = get(words[0]); err != nil {
				return err
			}
		} else if len(words) > 1 {
			return usagef("catalog show takes a label and at most one revision")
		}
		if *asJSON {
			return writeJSON(a.Stdout, c)
		}
		var srv *config.Server
		if cfg, err := a.loadConfig(); err == nil {
			if s, ok := cfg.Servers[label]; ok {
				srv = &s
			}
		}
		return writeCatalogText(a.Stdout, c, revs, srv)
	default: // diff
		var from, to catalog.Catalog
		switch len(words) {
		case 0:
			to, _ = store.Current(label)
			if len(revs) > 1 {
				from, _ = store.Get(label, revs[len(revs)-2])
			}
		case 2:
			if from, err = get(words[0]); err != nil {
				return err
			}
			if to, err = get(words[1]); err != nil {
				return err
			}
		default:
			return usagef("catalog diff takes a label and either no revision or two (FROM TO)")
		}
		d := catalog.Compare(from, to)
		if *asJSON {
			return writeJSON(a.Stdout, d)
		}
		return writeDiffText(a.Stdout, label, d)
	}
}

// writeCatalogText prints one catalog revision for a person: the revision,
// then per tool its policy, hints, description and arguments.
func writeCatalogText(w io.Writer, c catalog.Catalog, revs []uint64, srv *config.Server) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: catalog revision %d", c.Label, c.Revision)
	if n := len(revs); n > 0 && revs[n-1] != c.Revision {
		fmt.Fprintf(&b, " (the latest is %d)", revs[n-1])
	} else {
		b.WriteString(" (the latest)")
	}
	fmt.Fprintf(&b, ", %d tool(s)\n", len(c.Tools))
	if !c.FetchedAt.IsZero() {
		fmt.Fprintf(&b, "fetched %s from epoch %s\n", c.FetchedAt.UTC().Format("2006-01-02T15:04:05Z"), c.Epoch)
	}
	fmt.Fprintf(&b, "digest %s\n", c.Digest)
	all := make([]string, len(c.Tools))
	for i, t := range c.Tools {
		all[i] = t.Name
	}
	for _, w := range textsafe.Warnings(all) {
		fmt.Fprintf(&b, "⚠ %s\n", w)
	}
	for _, t := range c.Tools {
		var tool struct {
			Title       string `json:"title"`
			Description string `json:"description"`
			InputSchema struct {
				Properties map[string]struct {
					Type    any   `json:"type"`
					Enum    []any `json:"enum"`
					Default any   `json:"default"`
				} `json:"properties"`
				Required []string `json:"required"`
			} `json:"inputSchema"`
			Annotations struct {
				ReadOnly    *bool `json:"readOnlyHint"`
				Destructive *bool `json:"destructiveHint"`
				Idempotent  *bool `json:"idempotentHint"`
				OpenWorld   *bool `json:"openWorldHint"`
			} `json:"annotations"`
		}
		_ = json.Unmarshal(t.Raw, &tool)
		fmt.Fprintf(&b, "\n%s", textsafe.Name(t.Name, all))
		if tool.Title != "" && tool.Title != t.Name {
			fmt.Fprintf(&b, " — %s", textsafe.Line(tool.Title))
		}
		b.WriteString("\n")
		var facts []string
		if srv != nil {
			facts = append(facts, "policy "+string(srv.Policy(t.Name)))
		}
		hint := func(p *bool, yes, no string) {
			if p != nil && *p && yes != "" {
				facts = append(facts, yes)
			} else if p != nil && !*p && no != "" {
				facts = append(facts, no)
			}
		}
		hint(tool.Annotations.ReadOnly, "read-only hint", "")
		hint(tool.Annotations.Destructive, "destructive hint", "not destructive (hint)")
		hint(tool.Annotations.Idempotent, "idempotent hint", "")
		hint(tool.Annotations.OpenWorld, "open-world hint", "")
		if len(facts) > 0 {
			fmt.Fprintf(&b, "  %s\n", strings.Join(facts, ", "))
		}
		if d := firstLine(tool.Description, 100); d != "" {
			fmt.Fprintf(&b, "  %s\n", textsafe.Line(d))
		}
		names := make([]string, 0, len(tool.InputSchema.Properties))
		for k := range tool.InputSchema.Properties {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			p := tool.InputSchema.Properties[k]
			var parts []string
			switch typ := p.Type.(type) {
			case string:
				parts = append(parts, typ)
			case nil:
			default: // a list of types
				var names []string
				if list, ok := typ.([]any); ok {
					for _, x := range list {
						names = append(names, textsafe.Line(fmt.Sprint(x)))
					}
				}
				if names != nil {
					parts = append(parts, strings.Join(names, "|"))
				} else {
					parts = append(parts, compactJSON(typ))
				}
			}
			if slices.Contains(tool.InputSchema.Required, k) {
				parts = append(parts, "required")
			}
			if p.Enum != nil {
				parts = append(parts, "one of "+compactJSON(p.Enum))
			}
			if p.Default != nil {
				parts = append(parts, "default "+compactJSON(p.Default))
			}
			fmt.Fprintf(&b, "  · %s", textsafe.Line(k))
			if len(parts) > 0 {
				fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nFull tool objects: add --json.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDiffText prints a catalog diff for a person: the revisions, then one
// line per change with its severity, most severe first (as on the card).
func writeDiffText(w io.Writer, label string, d catalog.Diff) error {
	var b strings.Builder
	if d.From == 0 {
		fmt.Fprintf(&b, "%s: catalog revision %d is the first stored one; every tool counts as added\n", label, d.To)
	} else {
		fmt.Fprintf(&b, "%s: catalog revision %d → %d", label, d.From, d.To)
		if m := d.MaxSeverity(); m != catalog.SeverityNone {
			fmt.Fprintf(&b, " (most severe change: %s)", m)
		}
		b.WriteString("\n")
	}
	for _, l := range strings.Split(strings.TrimRight(d.Text(), "\n"), "\n") {
		fmt.Fprintf(&b, "  %s\n", textsafe.Line(l))
	}
	var names []string
	for _, ch := range d.Changes {
		if ch.Tool != "" && !slices.Contains(names, ch.Tool) {
			names = append(names, ch.Tool)
		}
	}
	for _, w := range textsafe.Warnings(names) {
		fmt.Fprintf(&b, "  ⚠ %s\n", w)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// firstLine returns the first line of s, cut to n characters.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return textsafe.Line(fmt.Sprint(v))
	}
	return string(textsafe.JSON(b))
}
