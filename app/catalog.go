package app

import (
	"errors"
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
	data, err := control.Call(a.Dirs.Socket(), control.Hello{Op: control.OpRestart, Label: args[0]}, 10*time.Second)
	if err != nil {
		var re *control.RefusedError
		if errors.As(err, &re) {
			return errors.New(re.Reply.Error)
		}
		return err
	}
	fmt.Fprintf(a.Stdout, "Restarting %s: %s\n", args[0], data)
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
