package daemon

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/identity"
)

// The code a card shows (docs/DESIGN.md, "The code that changed"): each
// epoch's launch snapshots its server's source tree; a card keeps the
// snapshot of the epoch it asks about; a grant the person makes from the
// card makes that snapshot the server's approved code, kept on disk per
// label, which the next card is compared with.

// codeEpochs bounds the epochs whose snapshots are kept in memory.
const codeEpochs = 64

// codeWait bounds how long a report waits for a snapshot being taken.
const codeWait = 10 * time.Second

type codeSnap struct {
	label string
	done  chan struct{} // closed once snap and err are set
	snap  *codediff.Snapshot
	err   error
}

type codeStore struct {
	dir  string // where each label's approved snapshot is kept
	home string
	lim  codediff.Limits
	log  *slog.Logger

	mu        sync.Mutex
	byEpoch   map[string]*codeSnap // guarded by mu
	epochs    []string             // guarded by mu; oldest first, at most codeEpochs
	byRequest map[string]*codeSnap // guarded by mu; pending cards
}

func newCodeStore(dir string, log *slog.Logger) *codeStore {
	home, _ := os.UserHomeDir()
	return &codeStore{dir: dir, home: home, lim: codediff.DefaultLimits, log: log,
		byEpoch: map[string]*codeSnap{}, byRequest: map[string]*codeSnap{}}
}

// sourceRoot is the tree rec's code is edited in (codediff.SourceRoot):
// its watched directories first, then the entry's, the package's, the
// executable's and the working directory's tree.
func (c *codeStore) sourceRoot(rec identity.Record) (string, bool) {
	paths := append(slices.Sorted(maps.Keys(rec.ExtraDigests)), rec.Entry)
	if rec.Package != nil {
		paths = append(paths, rec.Package.Dir)
	}
	paths = append(paths, rec.ResolvedExecutable.Path, rec.WorkingDirectory)
	return codediff.SourceRoot(c.home, paths...)
}

// take starts the snapshot of rec's tree (in the background: a launch does
// not wait for it) and returns it.
func (c *codeStore) take(rec identity.Record) *codeSnap {
	s := &codeSnap{label: rec.ServerLabel, done: make(chan struct{})}
	root, ok := c.sourceRoot(rec)
	if !ok {
		s.err = errNoSourceTree
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		s.snap, s.err = codediff.Take(root, c.lim)
		if s.snap != nil {
			s.snap.Epoch = rec.Epoch
		}
		if s.err != nil {
			c.log.Info("taking the source snapshot", "label", rec.ServerLabel, "root", root, "err", s.err)
		}
	}()
	return s
}

var errNoSourceTree = errors.New("the measured files lie in no source tree Portcullis can read (no git work tree, watched directory or project directory)")

// launched snapshots the tree of a new epoch.
func (c *codeStore) launched(rec identity.Record) {
	if rec.Epoch == "" {
		return
	}
	s := c.take(rec)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byEpoch[rec.Epoch] = s
	c.epochs = append(c.epochs, rec.Epoch)
	for len(c.epochs) > codeEpochs {
		delete(c.byEpoch, c.epochs[0])
		c.epochs = c.epochs[1:]
	}
}

// requested keeps, for card r, the snapshot of the epoch it asks about;
// an epoch the store did not see start (observed behind its launch) or a
// launch not started yet is snapshotted now, from rec.
func (c *codeStore) requested(r authz.Request, rec identity.Record, haveRec bool) {
	c.mu.Lock()
	s := c.byEpoch[r.Card.CurrentEpoch]
	c.mu.Unlock()
	if s == nil || r.Card.CurrentEpoch == "" {
		if !haveRec {
			rec = identity.Record{ServerLabel: r.Card.ServerLabel, Entry: r.Card.Entry,
				ResolvedExecutable: identity.FileDigest{Path: r.Card.Executable}}
		}
		rec.Epoch = r.Card.CurrentEpoch
		s = c.take(rec)
	}
	c.mu.Lock()
	c.byRequest[r.ID] = s
	c.mu.Unlock()
}

// decided drops card id's snapshot; a grant makes it the label's approved
// code first.
func (c *codeStore) decided(id string, granted bool) {
	c.mu.Lock()
	s := c.byRequest[id]
	delete(c.byRequest, id)
	c.mu.Unlock()
	if s == nil || !granted {
		return
	}
	go func() {
		select {
		case <-s.done:
		case <-time.After(codeWait):
			c.log.Info("the source snapshot of a granted card was not ready; the approved code is not updated", "label", s.label, "request", id)
			return
		}
		if s.snap == nil {
			return
		}
		if err := c.save(s.label, s.snap); err != nil {
			c.log.Warn("keeping the approved source snapshot", "label", s.label, "err", err)
		}
	}()
}

func (c *codeStore) file(label string) string {
	return filepath.Join(c.dir, hex.EncodeToString([]byte(label))+".json")
}

// save writes label's approved snapshot (mode 0600, replaced whole).
func (c *codeStore) save(label string, s *codediff.Snapshot) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(c.dir, ".approved-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.file(label))
}

// approved reads label's approved snapshot; nil, nil when there is none.
func (c *codeStore) approved(label string) (*codediff.Snapshot, error) {
	b, err := os.ReadFile(c.file(label))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s codediff.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s is not a snapshot: %w", c.file(label), err)
	}
	return &s, nil
}

// report compares card r's snapshot with its server's approved code.
func (c *codeStore) report(ctx context.Context, r authz.Request) codediff.Report {
	rep := codediff.Report{Label: r.Card.ServerLabel, Epoch: r.Card.CurrentEpoch}
	c.mu.Lock()
	s := c.byRequest[r.ID]
	c.mu.Unlock()
	if s == nil {
		rep.Note = "no source snapshot was taken for this card"
		return rep
	}
	ctx, cancel := context.WithTimeout(ctx, codeWait)
	defer cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		rep.Note = "the source snapshot is still being taken: ask again"
		return rep
	}
	if s.err != nil {
		rep.Note = "no code to show: " + s.err.Error()
		return rep
	}
	rep.Root, rep.TakenAt, rep.Files = s.snap.Root, s.snap.TakenAt, len(s.snap.Files)
	old, err := c.approved(r.Card.ServerLabel)
	switch {
	case err != nil:
		rep.Note = "the code you last approved on this server cannot be read (" + err.Error() + "): nothing to compare with"
		return rep
	case old == nil:
		rep.Note = fmt.Sprintf("no code approved earlier on %s is kept, so there is nothing to compare with (%d files in %s)", r.Card.ServerLabel, len(s.snap.Files), s.snap.Root)
		return rep
	}
	rep.Since, rep.SinceAt = old.Epoch, old.TakenAt
	rep.Changes = codediff.Compare(old, s.snap)
	rep.Omitted = old.Omitted + s.snap.Omitted
	if old.Root != s.snap.Root {
		rep.Note = "the code you approved was in " + old.Root + "; files are compared by their path below each tree"
	}
	return rep
}

// CodeChanges is what changed in the source tree of pending request id's
// server since the code the person last approved on it.
func (d *Daemon) CodeChanges(ctx context.Context, id string) (codediff.Report, error) {
	for _, r := range d.authz.Pending() {
		if r.ID == id {
			return d.code.report(ctx, r), nil
		}
	}
	return codediff.Report{}, fmt.Errorf("approval request %s is not pending", id)
}
