package app

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
)

// runRestart asks the daemon to replace the server process of every agent
// run of a label with a new epoch.
func (a *App) runRestart(args []string) error {
	if len(args) != 1 {
		return usagef("restart needs exactly one server label")
	}
	label := args[0]
	if cfg, err := a.loadConfig(); err == nil {
		if _, ok := cfg.Servers[label]; !ok {
			return fmt.Errorf("no server labelled %q is configured in %s", label, a.Dirs.ConfigFile())
		}
	}
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpRestart, Label: label}, 10*time.Second)
	if err != nil {
		return daemonError(err)
	}
	var n struct {
		Restarted int `json:"restarted"`
	}
	_ = json.Unmarshal(data, &n)
	fmt.Fprintf(a.Stdout, "Restarting %s for %d agent run(s): each gets a new epoch and must be approved again (portcullis status).\n", label, n.Restarted)
	return nil
}

func (a *App) openCatalogs() (*catalog.Store, error) {
	return catalog.OpenStore(filepath.Join(a.Dirs.State, "catalog"))
}

// runCatalog prints catalog revisions and diffs from the catalog store.
//
//	portcullis catalog show LABEL [REV]
//	portcullis catalog diff LABEL [FROM TO]   (default: previous → current)
func (a *App) runCatalog(args []string) error {
	if len(args) < 2 {
		return usagef("catalog needs a subcommand and a label: catalog show LABEL [REV] | catalog diff LABEL [FROM TO]")
	}
	sub, label, rest := args[0], args[1], args[2:]
	store, err := a.openCatalogs()
	if err != nil {
		return err
	}
	revs := store.Revisions(label)
	if len(revs) == 0 {
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
		if len(rest) == 1 {
			if c, err = get(rest[0]); err != nil {
				return err
			}
		} else if len(rest) > 1 {
			return usagef("catalog show takes a label and at most one revision")
		}
		return writeJSON(a.Stdout, c)
	case "diff":
		var from, to catalog.Catalog
		switch len(rest) {
		case 0:
			to, _ = store.Current(label)
			if len(revs) > 1 {
				from, _ = store.Get(label, revs[len(revs)-2])
			}
		case 2:
			if from, err = get(rest[0]); err != nil {
				return err
			}
			if to, err = get(rest[1]); err != nil {
				return err
			}
		default:
			return usagef("catalog diff takes a label and either no revision or two (FROM TO)")
		}
		return writeJSON(a.Stdout, catalog.Compare(from, to))
	}
	return usagef("unknown catalog subcommand %q (show, diff)", sub)
}
