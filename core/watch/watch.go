// Package watch notices builds: it watches the files and directories that
// make up servers' execution identities (executables, entry scripts,
// lockfiles, the paths a person names), waits until writes settle, and then
// reports which watched paths changed, per server label.
//
// It watches directories, never single files: editors and build tools
// replace files by renaming a new one over the old, which ends a watch on
// the file itself. A watched file is observed through its parent directory;
// a watched directory is watched recursively, subdirectories created later
// included. The report says only that something changed: whether the
// identity really differs is decided by recomputing digests (package
// identity), since a build that rewrites identical bytes is no new code.
package watch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Event reports that paths watched for Key changed and then stayed quiet for
// the settle delay. Paths are the watched roots (as given to Set) under
// which something changed, sorted. LastWrite is when the last change was
// seen.
type Event struct {
	Key       string
	Paths     []string
	LastWrite time.Time
	done      func() // ends the change's Unsettled report; nil on a Started event
}

// Done tells the Watcher that the consumer has acted on a settled Event
// (measured the identity again and decided whether a new epoch follows):
// Unsettled reports the change until then. It does nothing on a Started
// event, or when called again.
func (ev Event) Done() {
	if ev.done != nil {
		ev.done()
	}
}

// Watcher watches sets of paths, one set per key (a server label).
type Watcher struct {
	settle  time.Duration
	log     *slog.Logger
	fsw     *fsnotify.Watcher
	events  chan Event
	started chan Event

	mu      sync.Mutex
	sets    map[string][]string       // guarded by mu; key → watched roots (absolute, clean)
	held    map[string][]string       // guarded by mu; key → directories it acquired
	dirs    map[string]int            // guarded by mu; directory → number of acquisitions
	pending map[string]*pendingChange // guarded by mu; key → changes waiting to settle
	// settling holds, per key, the change whose settled Event was
	// delivered and not yet Done.
	settling map[string]*pendingChange    // guarded by mu
	stamps   map[string]stamp             // guarded by mu; watched file root → its stat when last seen (Unsettled)
	isDir    map[string]bool              // guarded by mu; root → it is a directory tree
	data     map[string]func(string) bool // guarded by mu; key → which changed paths are data (SetData)
	timers   map[string]*time.Timer       // guarded by mu
	closed   bool                         // guarded by mu
	clock    func() time.Time
}

type pendingChange struct {
	paths   map[string]bool
	last    time.Time
	settled chan struct{} // closed once the consumer is Done with the change
	once    sync.Once
}

// end closes pc.settled, once.
func (pc *pendingChange) end() { pc.once.Do(func() { close(pc.settled) }) }

// New returns a Watcher that reports a key's change once no write has been
// seen under its paths for settle (200 ms when zero).
func New(settle time.Duration, log *slog.Logger) (*Watcher, error) {
	if settle <= 0 {
		settle = 200 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &Watcher{
		settle:   settle,
		log:      log,
		fsw:      fsw,
		events:   make(chan Event, 16),
		started:  make(chan Event, startedBuffer),
		sets:     map[string][]string{},
		held:     map[string][]string{},
		dirs:     map[string]int{},
		pending:  map[string]*pendingChange{},
		settling: map[string]*pendingChange{},
		stamps:   map[string]stamp{},
		isDir:    map[string]bool{},
		data:     map[string]func(string) bool{},
		timers:   map[string]*time.Timer{},
		clock:    time.Now,
	}, nil
}

// Events delivers settled changes. It is never closed: stop reading when
// Serve has returned.
func (w *Watcher) Events() <-chan Event { return w.events }

// startedBuffer is how many "change started" events wait for a reader.
const startedBuffer = 64

// Started delivers, for each change, an Event as soon as its first
// file-system event is seen, before the settle delay: Paths holds the root
// it touched, LastWrite when. The settled Event on Events follows. A
// consumer closes the gate here (calls are held while a build is in
// progress) and decides on the settled event. Events are dropped, and
// logged, when nobody reads; never closed.
func (w *Watcher) Started() <-chan Event { return w.started }

// Set replaces the paths watched for key; an empty list stops watching for
// key. Paths that do not exist yet are watched through the nearest existing
// parent, so a build output created later is seen. Relative paths are made
// absolute against the working directory of the daemon.
func (w *Watcher) Set(key string, paths []string) error {
	var roots []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		roots = append(roots, filepath.Clean(abs))
	}
	slices.Sort(roots)
	roots = slices.Compact(roots)

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("watcher closed")
	}
	for _, d := range w.held[key] {
		w.releaseLocked(d)
	}
	delete(w.held, key)
	delete(w.sets, key)
	if len(roots) == 0 {
		return nil
	}
	w.sets[key] = roots
	var errs []error
	for _, r := range roots {
		for _, d := range w.dirsFor(r) {
			if err := w.acquireLocked(key, d); err != nil {
				errs = append(errs, err)
			}
		}
		if _, known := w.stamps[r]; !known && !w.isDir[r] {
			// The file as it is when its watch begins; a root watched
			// already keeps the stat it was last seen with.
			w.stamps[r] = stampOf(r)
		}
	}
	w.forgetStampsLocked()
	return errors.Join(errs...)
}

// forgetStampsLocked drops the stats of files no key watches any more.
func (w *Watcher) forgetStampsLocked() {
	watched := map[string]bool{}
	for _, roots := range w.sets {
		for _, r := range roots {
			watched[r] = true
		}
	}
	for r := range w.stamps {
		if !watched[r] {
			delete(w.stamps, r)
		}
	}
}

// Unsettled returns, for key, a channel closed once the changes to its
// paths have settled and the consumer is Done with them; nil when nothing
// is unsettled. Unsettled means: a change was seen and the settle delay
// has not passed since its last write, or its settled Event was delivered
// and is not Done yet, or a watched file (a root that is no directory)
// differs on disk from when it was last seen, although no event reported
// it yet (its event is still on its way: it is noted now, as an event
// would be). A change inside a watched directory is known only by its
// event. Callers that hold work while the change settles bound their own
// wait: a tree written to without pause never settles.
func (w *Watcher) Unsettled(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pc := w.pending[key]; pc != nil {
		return pc.settled
	}
	if pc := w.settling[key]; pc != nil {
		return pc.settled
	}
	if w.closed {
		return nil
	}
	for _, r := range w.sets[key] {
		if w.isDir[r] {
			continue
		}
		if st, seen := w.stamps[r], stampOf(r); st != seen {
			w.log.Info("a watched file changed before its event was read", "key", key, "path", r)
			w.noteLocked(key, r)
			return w.pending[key].settled
		}
	}
	return nil
}

// SetData sets, for key, which changes inside its watched directories are
// data, not a build: isData is asked about each changed path strictly
// inside a watched directory (a path that is itself a watched root is
// always a change), and a change it calls data is not reported. Nil
// reports every change. The identity's rules decide (see
// identity.DataFilter): a server writing its ledger or log in its source
// tree starts no build.
func (w *Watcher) SetData(key string, isData func(path string) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if isData == nil {
		delete(w.data, key)
		return
	}
	w.data[key] = isData
}

// dirsFor lists the directories to watch for root: the tree when root is a
// directory, else the nearest existing parent directory.
func (w *Watcher) dirsFor(root string) []string {
	info, err := os.Stat(root)
	if err == nil && info.IsDir() {
		w.isDir[root] = true
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if p != root && skipDir(d.Name()) {
					return filepath.SkipDir
				}
				dirs = append(dirs, p)
			}
			return nil
		})
		return dirs
	}
	w.isDir[root] = false
	dir := filepath.Dir(root)
	for {
		if info, err := os.Stat(dir); err == nil && info.IsDir() {
			return []string{dir}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// skipDir leaves out version-control metadata, whose churn is no build.
func skipDir(name string) bool { return name == ".git" || name == ".hg" || name == ".svn" }

func (w *Watcher) acquireLocked(key, dir string) error {
	w.held[key] = append(w.held[key], dir)
	w.dirs[dir]++
	if w.dirs[dir] > 1 {
		return nil
	}
	if err := w.fsw.Add(dir); err != nil {
		w.log.Warn("cannot watch directory", "dir", dir, "err", err)
		return err
	}
	return nil
}

func (w *Watcher) releaseLocked(dir string) {
	if w.dirs[dir] == 0 {
		return
	}
	w.dirs[dir]--
	if w.dirs[dir] == 0 {
		delete(w.dirs, dir)
		_ = w.fsw.Remove(dir)
	}
}

// Serve handles file-system events until ctx ends, then returns nil; it
// returns an error when the kernel's notifications stop on their own. A
// Serve after one returned starts watching again (the daemon restarts a
// service that stopped): a new notification queue on every watched
// directory, and every key reported changed, since what happened
// meanwhile was not seen.
func (w *Watcher) Serve(ctx context.Context) error {
	if err := w.reopen(); err != nil {
		return err
	}
	defer func() {
		w.mu.Lock()
		w.closed = true
		for _, t := range w.timers {
			t.Stop()
		}
		// Nothing will settle these now: whoever waits on them goes on.
		for key, pc := range w.pending {
			pc.end()
			delete(w.pending, key)
			delete(w.timers, key)
		}
		for key, pc := range w.settling {
			pc.end()
			delete(w.settling, key)
		}
		w.mu.Unlock()
		w.fsw.Close()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return errNotifyClosed
			}
			w.handle(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return errNotifyClosed
			}
			// An overflow loses events: treat every key as changed, so
			// that digests are recomputed rather than a build missed.
			w.log.Warn("file watching error", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.mu.Lock()
				for key, roots := range w.sets {
					for _, r := range roots {
						w.noteLocked(key, r)
					}
				}
				w.mu.Unlock()
			}
		}
	}
}

// errNotifyClosed: the kernel's notification queue was closed under Serve.
var errNotifyClosed = errors.New("file watching stopped: the notification queue was closed")

// reopen readies a Watcher whose last Serve returned for the next one.
func (w *Watcher) reopen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		return nil
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file watching cannot start again: %w", err)
	}
	w.fsw, w.closed = fsw, false
	// The trees may have changed meanwhile: their directories are listed
	// anew (acquireLocked logs one that cannot be watched).
	w.held, w.dirs = map[string][]string{}, map[string]int{}
	for key, roots := range w.sets {
		for _, r := range roots {
			for _, d := range w.dirsFor(r) {
				_ = w.acquireLocked(key, d)
			}
			w.noteLocked(key, r)
		}
	}
	return nil
}

func (w *Watcher) handle(ev fsnotify.Event) {
	name := filepath.Clean(ev.Name)
	if ev.Op == fsnotify.Chmod && !isExecutable(name) {
		// Metadata only: no new bytes. A file made executable becomes
		// code, which an ignore pattern no longer leaves out.
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Op.Has(fsnotify.Create) {
		if info, err := os.Stat(name); err == nil && info.IsDir() && !skipDir(filepath.Base(name)) {
			// A new subdirectory of a watched tree: watch it and what
			// was created inside before the watch began.
			for key, roots := range w.sets {
				for _, r := range roots {
					if w.isDir[r] && within(name, r) {
						for _, d := range w.dirsFor(name) {
							_ = w.acquireLocked(key, d)
						}
					}
				}
			}
		}
	}
	if ev.Op.Has(fsnotify.Remove) || ev.Op.Has(fsnotify.Rename) {
		w.goneLocked(name)
	}
	for key, roots := range w.sets {
		for _, r := range roots {
			if name == r || (w.isDir[r] && within(name, r)) {
				if name != r && w.data[key] != nil && w.data[key](name) {
					continue // data the server wrote: no build
				}
				w.noteLocked(key, r)
			}
			if !w.isDir[r] && within(r, name) && ev.Op.Has(fsnotify.Create) && (name != r || isDirectory(name)) {
				// A missing parent of a watched path appeared, or a
				// directory root was made again: watch closer to it.
				for _, d := range w.dirsFor(r) {
					_ = w.acquireLocked(key, d)
				}
				// The file may have been written before the new watch
				// began (mkdir -p out && cp server out/): a build.
				if _, err := os.Lstat(r); err == nil {
					w.noteLocked(key, r)
				}
			}
		}
	}
}

// goneLocked follows the removal (or renaming away) of name. A watched
// directory takes its watch with it (inotify drops it; kqueue's descriptor
// stays on the moved or deleted inode): it is forgotten, so that a
// directory made again under that name is watched anew. A watched directory
// root, or a directory above a root, that went away is watched for from the
// nearest directory that is left (or watched again at once if it is back
// already), so that a clean build (rm -rf dist, then dist/ written again) is
// seen the next time too.
func (w *Watcher) goneLocked(name string) {
	if w.dirs[name] > 0 {
		delete(w.dirs, name)
		_ = w.fsw.Remove(name) // gone already on Linux; releases it elsewhere
	}
	for key, roots := range w.sets {
		for _, r := range roots {
			if (name == r && w.isDir[r]) || (name != r && within(r, name)) {
				// Watch what is there now: the nearest directory left,
				// or the root itself when the build made it again
				// already (events arrive after the fact).
				for _, d := range w.dirsFor(r) {
					_ = w.acquireLocked(key, d)
				}
				if _, err := os.Lstat(r); err == nil {
					// Back already: what was written in it before
					// its new watch began is a change.
					w.noteLocked(key, r)
				}
			}
		}
	}
}

// isExecutable reports whether p is a regular file with an execute bit now.
func isExecutable(p string) bool {
	info, err := os.Lstat(p)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0
}

// isDirectory reports whether p is a directory now.
func isDirectory(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

// within reports whether p is root or inside it.
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

func (w *Watcher) noteLocked(key, root string) {
	if !w.isDir[root] {
		w.stamps[root] = stampOf(root) // the file as this change leaves it
	}
	pc := w.pending[key]
	if pc == nil {
		pc = &pendingChange{paths: map[string]bool{}, settled: make(chan struct{})}
		w.pending[key] = pc
		select {
		case w.started <- Event{Key: key, Paths: []string{root}, LastWrite: w.clock()}:
		default:
			w.log.Warn("change-started event dropped: nobody reads them", "key", key, "path", root)
		}
	}
	pc.paths[root] = true
	pc.last = w.clock()
	if t := w.timers[key]; t != nil {
		t.Reset(w.settle)
		return
	}
	w.timers[key] = time.AfterFunc(w.settle, func() { w.fire(key) })
}

func (w *Watcher) fire(key string) {
	w.mu.Lock()
	pc := w.pending[key]
	delete(w.pending, key)
	delete(w.timers, key)
	closed := w.closed
	if pc != nil && !closed {
		w.settling[key] = pc
	}
	w.mu.Unlock()
	if pc == nil {
		return
	}
	if closed {
		pc.end()
		return
	}
	ev := Event{Key: key, LastWrite: pc.last, done: func() {
		w.mu.Lock()
		if w.settling[key] == pc {
			delete(w.settling, key)
		}
		w.mu.Unlock()
		pc.end()
	}}
	for p := range pc.paths {
		ev.Paths = append(ev.Paths, p)
	}
	slices.Sort(ev.Paths)
	// Blocks while the consumer is behind: a build is never dropped.
	w.events <- ev
}
