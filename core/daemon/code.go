package daemon

import (
	"context"
	"crypto/sha256"
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
	"github.com/portcullis/portcullis/core/ids"
)

// The code a card shows (docs/DESIGN.md, "The code that changed"): each
// epoch's launch snapshots its server's source tree; a card keeps the
// snapshot of the epoch it asks about; a grant the person makes from the
// card makes that snapshot the server's approved code, kept on disk per
// label, which the next card is compared with.

// codeEpochs bounds the epochs whose snapshots are kept in memory.
const codeEpochs = 64

// codeHeld bounds the text the epochs' snapshots hold in memory: a server
// relaunched again and again, rewriting a large tree each time, costs the
// daemon no more (the oldest epochs' snapshots are dropped first).
const codeHeld = 64 << 20

// codeWait bounds how long a report waits for a snapshot being taken.
const codeWait = 10 * time.Second

type codeSnap struct {
	label string
	done  chan struct{} // closed once snap, err and held are set
	snap  *codediff.Snapshot
	err   error
	held  int64 // bytes of text snap keeps
}

// heldNow is s's text in memory, 0 while it is being taken.
func (s *codeSnap) heldNow() int64 {
	select {
	case <-s.done:
		return s.held
	default:
		return 0
	}
}

type codeStore struct {
	dir     string // where each label's approved snapshot is kept
	home    string
	lim     codediff.Limits
	maxHeld int64         // codeHeld; tests shorten it
	takes   chan struct{} // one snapshot taken at a time
	log     *slog.Logger

	mu        sync.Mutex
	saved     map[string]string           // guarded by mu; label → SHA-256 of the approved snapshot this daemon wrote
	byEpoch   map[ids.EpochID]*codeSnap   // guarded by mu
	epochs    []ids.EpochID               // guarded by mu; oldest first, at most codeEpochs
	byRequest map[ids.RequestID]*codeSnap // guarded by mu; pending cards
}

func newCodeStore(dir string, log *slog.Logger) *codeStore {
	home, _ := os.UserHomeDir()
	return &codeStore{dir: dir, home: home, lim: codediff.DefaultLimits, maxHeld: codeHeld, takes: make(chan struct{}, 1), log: log,
		byEpoch: map[ids.EpochID]*codeSnap{}, byRequest: map[ids.RequestID]*codeSnap{}, saved: map[string]string{}}
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
func (c *codeStore) take(rec identity.Record, identityOf string) *codeSnap {
	s := &codeSnap{label: rec.ServerLabel, done: make(chan struct{})}
	root, ok := c.sourceRoot(rec)
	if !ok {
		s.err = errNoSourceTree
		close(s.done)
		return s
	}
	// The files the launch measured below root: always in the snapshot
	// (a .gitignore the server writes cannot hide them), and kept with
	// their measured digests so that codediff.Check sees a tree edited
	// between the measurement and the snapshot, or a kept copy altered.
	measured := map[string]string{}
	for path, sum := range map[string]string{rec.Entry: rec.EntryDigest, rec.Lockfile: rec.LockfileDigest,
		rec.ResolvedExecutable.Path: rec.ResolvedExecutable.SHA256} {
		if rel, err := filepath.Rel(root, path); err == nil && path != "" && sum != "" && filepath.IsLocal(rel) {
			measured[filepath.ToSlash(rel)] = sum
		}
	}
	go func() {
		defer close(s.done)
		c.takes <- struct{}{}
		s.snap, s.err = codediff.Take(root, c.lim, slices.Collect(maps.Keys(measured))...)
		<-c.takes
		if s.snap != nil {
			s.snap.Epoch, s.snap.Identity = rec.Epoch, identityOf
			if len(measured) > 0 {
				s.snap.Measured = measured
			}
			for _, f := range s.snap.Files {
				s.held += int64(len(f.Text))
			}
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
	s := c.take(rec, authz.IdentityDigest(rec))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byEpoch[rec.Epoch] = s
	c.epochs = append(c.epochs, rec.Epoch)
	var held int64
	for _, e := range c.epochs {
		held += c.byEpoch[e].heldNow()
	}
	for len(c.epochs) > codeEpochs || (len(c.epochs) > 1 && held > c.maxHeld) {
		held -= c.byEpoch[c.epochs[0]].heldNow()
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
			rec = identity.Record{ServerLabel: r.Card.ServerLabel, Entry: r.Card.Entry, EntryDigest: r.Card.EntryDigest,
				ResolvedExecutable: identity.FileDigest{Path: r.Card.Executable, SHA256: r.Card.ExecutableDigest}}
		}
		rec.Epoch = r.Card.CurrentEpoch
		s = c.take(rec, r.Card.Identity)
	}
	c.mu.Lock()
	c.byRequest[r.ID] = s
	c.mu.Unlock()
}

// decided drops card id's snapshot; a grant makes it the label's approved
// code first.
func (c *codeStore) decided(id ids.RequestID, granted bool) {
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
	sum := sha256.Sum256(b)
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
	if err := os.Rename(tmp.Name(), c.file(label)); err != nil {
		return err
	}
	c.mu.Lock()
	c.saved[label] = hex.EncodeToString(sum[:])
	c.mu.Unlock()
	return nil
}

// approved reads label's approved snapshot; nil, nil when there is none.
// A file this daemon wrote and finds replaced (the agent runs as the same
// user) is refused; one written by an earlier run is taken as found, and
// must still pass codediff.Check (docs/TRUST.md).
func (c *codeStore) approved(label string) (*codediff.Snapshot, error) {
	b, err := os.ReadFile(c.file(label))
	c.mu.Lock()
	want, wrote := c.saved[label]
	c.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		if wrote {
			return nil, fmt.Errorf("%s was deleted since this daemon wrote it", c.file(label))
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); wrote && hex.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("%s was replaced since this daemon wrote it", c.file(label))
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
	old, err := c.approved(r.Card.ServerLabel)
	if err != nil {
		rep.Root, rep.TakenAt, rep.Files = s.snap.Root, s.snap.TakenAt, len(s.snap.Files)
		rep.Note = "the code you last approved on this server cannot be read (" + err.Error() + "): nothing to compare with"
		return rep
	}
	return codediff.Build(r.Card.ServerLabel, old, s.snap)
}

// CodeChanges is what changed in the source tree of pending request id's
// server since the code the person last approved on it.
func (d *Daemon) CodeChanges(ctx context.Context, id ids.RequestID) (codediff.Report, error) {
	for _, r := range d.authz.Pending() {
		if r.ID == id {
			return d.code.report(ctx, r), nil
		}
	}
	return codediff.Report{}, fmt.Errorf("approval request %s is not pending", id)
}
