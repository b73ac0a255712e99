package audit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrUnavailable is wrapped by every error that means the log could not
// record an event (open, lock, write, fsync, rotation failures, a closed Log).
// The gateway answers such calls with audit_unavailable and does not forward
// them. Errors also wrap the underlying cause (for example syscall.ENOSPC).
var ErrUnavailable = errors.New("audit log unavailable")

// ErrInvalid is returned by Append for an event the log refuses to record: a
// type that is not made of [a-z0-9_], or fields that are not a JSON object
// (or exceed 4 MiB in canonical form). It does not make the Log fail.
var ErrInvalid = errors.New("invalid audit event")

// DefaultMaxFileBytes is the rotation size used when Options.MaxFileBytes is 0.
const DefaultMaxFileBytes = 64 << 20

// Observer is shown the events of a Log as they are written (see
// Options.Observer): the telemetry export.
type Observer interface {
	Observe(Event)
}

// Options configures Open.
type Options struct {
	// Dir is the audit directory (created with mode 0700 when missing).
	Dir string
	// Observer, when set, is shown each event once it is written to the
	// file (before the sync of an authority event), in the order of the
	// log. It is called with the writer's lock held: it must return at
	// once, never wait (copy the event onto a bounded queue and drop it
	// when that is full) and never call the Log. The event's Fields are
	// not modified afterwards and may be kept.
	Observer Observer
	// MaxFileBytes is the size in bytes past which a new file is started
	// (default DefaultMaxFileBytes). A file exceeds it only when a single
	// group commit does.
	MaxFileBytes int64
	// Key is the HMAC-SHA256 key that signs every event hash; nil writes
	// unsigned events. Log.DisableSigning and Log.EnableSigning change it
	// on an open Log.
	Key []byte
	// Clock gives event timestamps (default time.Now); they are stored in UTC.
	Clock func() time.Time
	// Logger receives operational messages (default: discarded).
	Logger *slog.Logger
	// GroupCommitWindow is how long the leader of a sync of authority
	// events waits for more events to join it before it syncs (default 0:
	// sync at once; events written while a sync runs share the next one
	// anyway).
	GroupCommitWindow time.Duration
	// SealKeys keeps the forward-secure sealing key (see LogSealed); nil:
	// the log is never sealed. Open loads the key when one is stored.
	SealKeys SealKeyStore
	// AnchorPath is the file, outside Dir, where each seal is recorded
	// (Anchor); "" writes none.
	AnchorPath string
	// Durability says which events Append makes durable before it returns
	// (see Durability); "" is DurabilityAuthority.
	Durability Durability
	// RecordWindow bounds how long an event appended with AppendRecord
	// stays written but not yet synced (default DefaultRecordWindow);
	// RecordMaxEvents how many such events may wait (default
	// DefaultRecordMaxEvents). The group commit that syncs them runs
	// when either is reached, or earlier with any authority event.
	RecordWindow    time.Duration
	RecordMaxEvents int

	hooks *hooks // failure injection in tests; nil in production
}

// hooks let tests replace the file system calls the writer makes.
type hooks struct {
	write    func(f *os.File, b []byte) (int, error)
	sameFile func(path string, info os.FileInfo) (bool, error) // the swap check
	sync     func(f *os.File) error
	open     func(name string, flag int, perm os.FileMode) (*os.File, error)
}

// Log is an open audit log. Its methods are safe for concurrent use. The
// files are guarded by wmu: every event is written by its caller with it
// held, without a round trip through another goroutine; an authority
// event's caller then syncs, or waits for a sync, without it (the group
// commit, awaitSyncLocked). One writer goroutine runs control requests
// (with wmu held throughout) and the record tier's group-commit timer.
type Log struct {
	opts Options
	log  *slog.Logger
	lock *os.File
	// opened is the last event of the log when Open returned (zero for a
	// new log): what the process that wrote before this one left.
	opened LogHead

	reqs      chan *request // unbuffered: a sent request is always answered
	quit      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	signing   atomic.Bool // the writer's key is set: new events are signed
	tamper    atomic.Pointer[Tamper]
	sealEpoch atomic.Pointer[uint64]
	sealErr   atomic.Pointer[error]
	failed    atomic.Pointer[error] // the writer's sticky failure (w.failed), for Err
	strict    atomic.Bool           // DurabilityStrict: AppendRecord is Append
	// kick tells the writer goroutine that events wait for a sync while
	// its group-commit timer is not armed (w.timerArmed): it arms it.
	kick chan struct{} // capacity 1

	wmu sync.Mutex
	w   writer // guarded by wmu (owned by Open before the writer starts)
	// synced is signalled (Broadcast, wmu held) whenever a sync ends or
	// waiters are done: sync waiters and Close wait on it.
	synced *sync.Cond
}

type writer struct {
	f       *os.File
	fileNum int
	size    int64
	seq     uint64
	prev    string
	signed  bool     // the last event carries a signature and is not signing_disabled: the next one must be signed
	key     []byte   // the key new events are signed with; nil: unsigned
	enc     *encoder // encoder of key
	plain   *encoder // unsigned encoder, for log_recovered before signing_enabled
	failed  error    // sticky ErrUnavailable
	closed  bool     // Close stopped the writer: nothing more is written
	buf     []byte
	headBuf []byte
	headF   *os.File // head.json, overwritten in place

	fInfo, headInfo os.FileInfo // f and headF as opened, to notice a swap

	sealKey            *SealKey // the current sealing epoch's key; nil: not sealed
	genesis, genesisTS string   // hash and ts of seq 1, for seals
	sinceSeal          bool     // events were written since the last seal
	lastSeal           []byte   // fields of the last event when Open found a log_sealed there

	// The group commit. written counts the events written since Open
	// (never reset: it numbers them for the sync waiters), synced how many
	// of them are durable; lastEv is the last one written, which head.json
	// names once it is durable (headN: the count it named last). syncing
	// says a leader runs a sync without wmu (leadSyncLocked); waiters are
	// the authority callers waiting for a sync that covers their event, in
	// the order of their n; retired the files closed (rotation, tampering,
	// Recover) while a leader synced: it closes them when it is done.
	written, synced uint64
	headN           uint64
	lastEv          Event
	syncing         bool
	waiters         []*syncWait
	retired         []*os.File
	// pendSince is when the oldest event not yet durable was written (or
	// earlier: when the sync that left it unsynced started); zero when
	// every event is durable. The group commit syncs at pendSince +
	// Options.RecordWindow at the latest. timerArmed says the writer
	// goroutine's timer for it runs (or a kick is on its way).
	pendSince  time.Time
	timerArmed bool

	one [1]item // the item of an append by its caller (appendNow)
	evs []Event // the events of the last commit (commitCheckedLocked), reused
}

// syncWait is an authority caller waiting for its event, the n-th written,
// to be durable; done and err are set under wmu by the sync that covers it
// or by the failure that makes the Log fail closed.
type syncWait struct {
	n    uint64
	done bool
	err  error
}

// unsyncedLocked is the number of events written and not yet durable.
func (w *writer) unsyncedLocked() int { return int(w.written - w.synced) }

// headSize is the fixed size of head.json: the record padded with spaces,
// so that overwriting it in place never leaves bytes of an older, longer one.
const headSize = 256

// request is a control request to the writer goroutine.
type request struct {
	op     ctlOp
	key    []byte         // opEnable
	reason string         // opDisable, opSeal, opTamper, opAck
	force  bool           // opSetup
	files  []TamperedFile // opTamper
	vk     VerificationKey
	done   chan result
}

// ctlOp is what a request asks of the writer.
type ctlOp int

const (
	opErr     ctlOp = iota // report the sticky failure (Err)
	opRecover              // Recover
	opDisable              // DisableSigning
	opEnable               // EnableSigning
	opSeal                 // Seal
	opSetup                // SetupSeals
	opTamper               // RecordTampered
	opAck                  // AcknowledgeTampered
)

type result struct {
	ev  Event
	err error
}

// item is one event to commit.
type item struct {
	typ      string
	fields   []byte
	unsigned bool
	ts       time.Time // zero: now
}

// Open opens (creating if needed) the audit log in o.Dir, takes its lock, and
// reads the tail of the last file to continue the chain. A torn last line is
// left in place and followed by a log_recovered event; if o.Key is set and the
// last event is unsigned or is signing_disabled, a signed signing_enabled
// event is appended. Errors wrap ErrUnavailable.
func Open(o Options) (*Log, error) {
	l, err := newLog(o)
	if err != nil {
		return nil, err
	}
	l.opened = LogHead{Seq: l.w.seq, Hash: l.w.prev}
	go l.run()
	return l, nil
}

// newLog does all of Open but start the writer goroutine.
func newLog(o Options) (*Log, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("%w: no directory", ErrUnavailable)
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.hooks == nil {
		o.hooks = &hooks{}
	}
	// The append and the swap check are ordinary calls through os.File and
	// os.Stat: the scheduler knows of each, so one that blocks (a busy disk,
	// a network file system) never holds a processor or a garbage
	// collection. The swap check (tamper.go) compares device and inode.
	if o.hooks.write == nil {
		o.hooks.write = (*os.File).Write
	}
	if o.hooks.sameFile == nil {
		o.hooks.sameFile = sameFile
	}
	if o.hooks.sync == nil {
		o.hooks.sync = syncData
	}
	if o.hooks.open == nil {
		o.hooks.open = os.OpenFile
	}
	switch o.Durability {
	case "":
		o.Durability = DurabilityAuthority
	case DurabilityAuthority, DurabilityStrict:
	default:
		return nil, fmt.Errorf("%w: durability %q is not %q or %q", ErrUnavailable, o.Durability, DurabilityStrict, DurabilityAuthority)
	}
	if o.RecordWindow <= 0 {
		o.RecordWindow = DefaultRecordWindow
	}
	if o.RecordMaxEvents <= 0 {
		o.RecordMaxEvents = DefaultRecordMaxEvents
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating %s: %w", ErrUnavailable, o.Dir, err)
	}
	lock, err := lockDir(filepath.Join(o.Dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("%w: locking %s: %w", ErrUnavailable, o.Dir, err)
	}
	l := &Log{
		opts: o,
		log:  o.Logger,
		lock: lock,
		reqs: make(chan *request),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		kick: make(chan struct{}, 1),
	}
	l.synced = sync.NewCond(&l.wmu)
	l.setKeyLocked(bytes.Clone(o.Key))
	l.strict.Store(o.Durability == DurabilityStrict)
	l.w.plain = newEncoder(nil)
	if o.SealKeys != nil {
		k, err := o.SealKeys.Load()
		switch {
		case err == nil:
			l.w.sealKey = &k // finishSealLocked decides, once the tail is read
		case errors.Is(err, ErrNoSealKey):
			if a, ok, _ := ReadAnchor(o.AnchorPath); ok {
				err := fmt.Errorf("the sealing key is gone but the log was sealed up to epoch %d: the log is not sealed until `portcullis audit setup-keys --force`", a.Epoch)
				l.log.Error("audit sealing key", "err", err)
				l.sealErr.Store(&err)
			}
		default:
			l.log.Error("the audit sealing key cannot be read; the log is not sealed", "err", err)
			l.sealErr.Store(&err)
		}
	}
	if err := l.load(); err != nil {
		if l.w.f != nil {
			l.w.f.Close()
		}
		lock.Close()
		return nil, err
	}
	l.finishSealLocked()
	return l, nil
}

// Append records one event of type typ (lower-case letters, digits and
// underscores) with fields, which must encode to a JSON object (a struct such
// as ToolCalled, a map, or json.RawMessage; nil means {}). It returns the
// event once it is written and synced; concurrent callers share syncs (a
// group commit: see the package doc).
//
// Errors: ErrInvalid for a bad type or fields, or for signing_enabled and
// signing_disabled, which only the Log writes; an error wrapping
// ErrUnavailable when the log cannot be written, in which case the Log fails
// closed until Recover succeeds; ctx.Err() when ctx has ended before the
// event is written (once written, Append waits for its sync whatever ctx
// says: that wait is one fdatasync).
func (l *Log) Append(ctx context.Context, typ string, fields any) (Event, error) {
	return l.append(ctx, typ, fields, false)
}

// AppendRecord records an event of the record tier (see Durability): it
// returns once the event is written to the file — a crash of this process
// after that loses nothing — and a group commit makes it durable within
// Options.RecordWindow or Options.RecordMaxEvents events, whichever comes
// first, or with the next authority event. Under DurabilityStrict it is
// Append. Arguments and errors as Append; a failure of the group commit
// that would have synced it makes the Log fail closed, as any write
// failure does, though this call returned nil.
func (l *Log) AppendRecord(ctx context.Context, typ string, fields any) (Event, error) {
	return l.append(ctx, typ, fields, !l.strict.Load())
}

// append checks and canonicalizes an event of a caller's type and hands it
// to the writer, of the record tier when record is set.
func (l *Log) append(ctx context.Context, typ string, fields any, record bool) (Event, error) {
	if !validType(typ) {
		return Event{}, fmt.Errorf("%w: type %q", ErrInvalid, typ)
	}
	switch typ {
	case TypeSigningEnabled, TypeSigningDisabled, TypeLogSealed, TypeLogTampered, TypeLogTamperAcknowledged:
		return Event{}, fmt.Errorf("%w: type %q is written by the log itself", ErrInvalid, typ)
	}
	canon, err := canonicalFields(fields)
	if err != nil {
		return Event{}, err
	}
	return l.appendNow(ctx, typ, canon, !record)
}

// appendNow writes an event from the caller's goroutine: under wmu, with
// the same swap check and chain as every commit, one write. An authority
// event (durable) then waits for a sync that covers it (awaitSyncLocked,
// which lets go of wmu while it syncs or waits); a record-tier event does
// only when Options.RecordMaxEvents events wait for one, and otherwise
// leaves it to the group commit (see pendingLocked).
func (l *Log) appendNow(ctx context.Context, typ string, canon []byte, durable bool) (Event, error) {
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	l.wmu.Lock()
	w := &l.w
	if w.closed {
		l.wmu.Unlock()
		return Event{}, fmt.Errorf("%w: log closed", ErrUnavailable)
	}
	before := w.unsyncedLocked()
	syncs := durable || before+1 >= l.opts.RecordMaxEvents
	w.one[0] = item{typ: typ, fields: canon}
	evs, err := l.writeTierLocked(w.one[:], syncs)
	w.one[0] = item{}
	var ev Event
	if err == nil {
		ev = evs[0] // evs is the writer's, reused by the next commit
		if syncs {
			err = l.awaitSyncLocked(w.written)
		}
	}
	l.wmu.Unlock()
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

// awaitSyncLocked returns once the n-th event written is durable, or with
// the error that made the Log fail before it was. It registers the caller
// as a waiter; when no sync runs, the caller leads one (leadSyncLocked),
// which covers every event written until it starts; otherwise it waits
// for the running one, and for the next if that did not cover n. Called
// with wmu held, which it lets go of while it syncs or waits.
func (l *Log) awaitSyncLocked(n uint64) error {
	w := &l.w
	if w.failed != nil {
		return w.failed
	}
	if n <= w.synced {
		return nil
	}
	sw := &syncWait{n: n}
	w.waiters = append(w.waiters, sw)
	for !sw.done {
		if w.syncing {
			l.synced.Wait()
			continue
		}
		l.leadSyncLocked()
	}
	return sw.err
}

// leadSyncLocked syncs the current file without holding wmu: it takes note
// of what is written, lets go of wmu for the sync (so that writers and the
// readers of the log go on, and their events wait for the next sync), and
// then, holding wmu again, marks those events durable, names the last in
// head.json and wakes the waiters. A failure makes the Log fail closed and
// fails every waiter. Files closed meanwhile (retireLocked) are closed
// after the sync.
func (l *Log) leadSyncLocked() {
	w := &l.w
	w.syncing = true
	if win := l.opts.GroupCommitWindow; win > 0 {
		// Let more events join this sync.
		l.wmu.Unlock()
		time.Sleep(win)
		l.wmu.Lock()
	}
	f, target, last, t0 := w.f, w.written, w.lastEv, time.Now()
	l.wmu.Unlock()
	err := l.opts.hooks.sync(f)
	l.wmu.Lock()
	w.syncing = false
	for _, rf := range w.retired {
		rf.Close()
	}
	clear(w.retired)
	w.retired = w.retired[:0]
	switch {
	case err != nil && w.failed == nil:
		l.failLocked("syncing "+f.Name(), err)
	case err == nil:
		l.syncedLocked(target, last)
		if w.unsyncedLocked() > 0 {
			// Written during the sync: their window started no
			// later than it did.
			w.pendSince = t0
			l.pendingLocked()
		}
	}
	l.synced.Broadcast()
}

// pendingLocked makes sure the writer goroutine's group-commit timer runs
// when events wait for a sync: one non-blocking send when it is not armed,
// so that a burst of events wakes the writer once per window, not once per
// event, and a sync that covers them all stops nothing (the timer, when it
// fires, finds nothing to sync or a later deadline; see groupDue).
func (l *Log) pendingLocked() {
	w := &l.w
	if w.timerArmed || w.unsyncedLocked() == 0 {
		return
	}
	w.timerArmed = true
	select {
	case l.kick <- struct{}{}:
	default: // a kick is pending already
	}
}

// groupDueLocked is what the writer goroutine's group commit does now:
// sync (the oldest waiting event has waited Options.RecordWindow), wait d
// more, or nothing (no event waits: the timer is disarmed).
func (l *Log) groupDueLocked(now time.Time) (sync bool, d time.Duration, armed bool) {
	w := &l.w
	if w.unsyncedLocked() == 0 || w.failed != nil {
		w.timerArmed = false
		return false, 0, false
	}
	d = w.pendSince.Add(l.opts.RecordWindow).Sub(now)
	return d <= 0, d, true
}

// syncedLocked records that the first n events written, of which last is
// the last, are durable: it names last in head.json (unless a later sync
// did already) and tells their waiters.
func (l *Log) syncedLocked(n uint64, last Event) {
	w := &l.w
	if n > w.synced {
		w.synced = n
	}
	if w.synced == w.written {
		w.pendSince = time.Time{}
	}
	if n > w.headN {
		w.headN = n
		l.writeHeadLocked(last)
	}
	i := 0
	for ; i < len(w.waiters) && w.waiters[i].n <= w.synced; i++ {
		w.waiters[i].done = true
	}
	l.dropWaitersLocked(i)
}

// dropWaitersLocked forgets the first i waiters (all of them done) and
// wakes them.
func (l *Log) dropWaitersLocked(i int) {
	w := &l.w
	if i == 0 {
		return
	}
	n := copy(w.waiters, w.waiters[i:])
	clear(w.waiters[n:])
	w.waiters = w.waiters[:n]
	l.synced.Broadcast()
}

// retireLocked closes f, a file the writer no longer writes to, or leaves
// that to the running sync (leadSyncLocked) when there is one: it may be
// syncing f.
func (l *Log) retireLocked(f *os.File) {
	if l.w.syncing {
		l.w.retired = append(l.w.retired, f)
		return
	}
	f.Close()
}

// Recover clears a failure: it closes the current file, reads the tail again
// (recording any torn bytes with log_recovered, as Open does) and lets Append
// write again. It returns nil when the log is healthy afterwards, else an
// error wrapping ErrUnavailable.
func (l *Log) Recover(ctx context.Context) error {
	_, err := l.do(ctx, &request{op: opRecover, done: make(chan result, 1)})
	return err
}

// Signing reports whether the events the Log appends now are signed: it was
// opened with a key, or EnableSigning succeeded, and signing was not turned
// off since.
func (l *Log) Signing() bool { return l.signing.Load() }

// DisableSigning turns signing off: it appends a signing_disabled event with
// reason (SigningDisabled), signed with the key the Log signs with, and the
// events after it carry no signature. Verify accepts unsigned events only
// after such an event, so the log says where its signatures stop; from there
// on someone who can write the files can forge events undetected.
//
// It returns nil when the Log does not sign already (writing nothing).
// Errors: one wrapping ErrInvalid when the last event is signed but the Log
// was opened without a key (the event could not be signed; nothing is
// written); as Append, one wrapping ErrUnavailable when the log cannot be
// written, in which case the Log fails closed and keeps signing (Recover
// follows a signing_disabled that did reach the disk with a signing_enabled);
// ctx.Err().
func (l *Log) DisableSigning(ctx context.Context, reason string) error {
	_, err := l.do(ctx, &request{op: opDisable, reason: reason, done: make(chan result, 1)})
	return err
}

// EnableSigning turns signing on with key (HMAC-SHA256): when events were
// written unsigned (signing turned off, or a log begun without a key), it
// appends a signing_enabled event signed with key whose UnsignedThrough is the
// sequence number before it, and signs every event after it.
//
// It returns nil without writing when the Log signs with key already, and
// when nothing needs closing (an empty log, or a signed last event of a Log
// opened without a key): later events are then simply signed. key must be the
// key that signed the earlier events of the log, if any, or Verify fails on
// them; the caller keeps it (see package daemon's AuditSigning).
//
// Errors: one wrapping ErrInvalid for an empty key or when the Log signs with
// another key (nothing is written); as Append, one wrapping ErrUnavailable when
// the log cannot be written, in which case the Log fails closed with key set
// (Recover writes the signing_enabled if it did not reach the disk); ctx.Err().
func (l *Log) EnableSigning(ctx context.Context, key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: an empty signing key", ErrInvalid)
	}
	_, err := l.do(ctx, &request{op: opEnable, key: bytes.Clone(key), done: make(chan result, 1)})
	return err
}

// Err returns the error wrapping ErrUnavailable that keeps the Log failing
// closed, or nil when it is healthy.
func (l *Log) Err() error {
	select {
	case <-l.quit:
		return fmt.Errorf("%w: log closed", ErrUnavailable)
	default:
	}
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Log) do(ctx context.Context, r *request) (Event, error) {
	select {
	case l.reqs <- r:
	case <-l.quit:
		return Event{}, fmt.Errorf("%w: log closed", ErrUnavailable)
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
	select {
	case res := <-r.done:
		return res.ev, res.err
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// LogHead names an event of the log: its sequence number and hash.
type LogHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// OpenedAt is the last event the log held when Open returned (zero for a
// new log): the head the previous writer left, or the log_recovered Open
// wrote after it.
func (l *Log) OpenedAt() LogHead { return l.opened }

// Close stops the writer after the events already handed to it are committed,
// closes the file and releases the directory lock. Later Appends fail with
// ErrUnavailable.
func (l *Log) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.quit)
		<-l.done
		l.wmu.Lock()
		defer l.wmu.Unlock()
		for l.w.syncing || len(l.w.waiters) > 0 {
			// Callers whose events were written before the Log closed
			// lead or wait for their syncs; the leader closes the files
			// retired meanwhile.
			l.synced.Wait()
		}
		if l.w.f != nil {
			err = l.w.f.Close()
		}
		if l.w.headF != nil {
			l.w.headF.Close()
			l.w.headF = nil
		}
		if cerr := l.lock.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// run is the writer goroutine: it runs control requests and the group
// commit of the record-tier events that callers wrote (appendNow) within
// Options.RecordWindow. Events themselves are written by their callers.
func (l *Log) run() {
	defer close(l.done)
	// group fires when the oldest event not yet durable may have waited
	// Options.RecordWindow (w.pendSince); it runs while w.timerArmed.
	group := time.NewTimer(time.Hour)
	group.Stop()
	// due syncs when the window is over and arms group for what waits.
	due := func() {
		l.wmu.Lock()
		defer l.wmu.Unlock()
		sync, d, armed := l.groupDueLocked(time.Now())
		if sync {
			l.syncPendingLocked()
			sync, d, armed = l.groupDueLocked(time.Now())
			if sync {
				d = 0 // a failed or tampered sync: look again at once
			}
		}
		group.Stop()
		if armed {
			group.Reset(max(d, 0))
		}
	}
	for {
		select {
		case r := <-l.reqs:
			l.wmu.Lock()
			l.control(r)
			l.pendingLocked()
			l.wmu.Unlock()
		case <-l.kick:
			due()
		case <-group.C:
			due()
		case <-l.quit:
			l.wmu.Lock()
			l.w.closed = true // nothing more is written: the sync covers all
			l.syncPendingLocked()
			l.wmu.Unlock()
			return
		}
	}
}

// control answers a request that carries no event: Recover, Err,
// DisableSigning or EnableSigning.
func (l *Log) control(r *request) {
	var err error
	switch r.op {
	case opRecover:
		err = l.recoverLocked()
	case opDisable:
		err = l.disableLocked(r.reason)
	case opEnable:
		err = l.enableLocked(r.key)
	case opSeal:
		err = l.sealNowLocked(r.reason)
	case opSetup:
		r.vk, err = l.setupLocked(r.force)
	case opTamper:
		if l.w.failed != nil {
			err = l.w.failed
		} else {
			err = l.tamperedLocked(r.files, r.reason)
		}
	case opAck:
		err = l.ackLocked(r.reason)
	default:
		err = l.w.failed
	}
	r.done <- result{err: err}
}

// setKeyLocked makes key (nil: none) the key new events are signed with.
func (l *Log) setKeyLocked(key []byte) {
	l.w.key = key
	l.w.enc = newEncoder(key)
	l.signing.Store(key != nil)
}

// disableLocked writes a signed signing_disabled and drops the key.
func (l *Log) disableLocked(reason string) error {
	w := &l.w
	if w.failed != nil {
		return w.failed
	}
	if w.key == nil {
		if w.signed {
			return fmt.Errorf("%w: the log's last event is signed but it was opened without the key: signing_disabled cannot be signed", ErrInvalid)
		}
		return nil
	}
	fields, err := canonicalFields(SigningDisabled{Reason: reason})
	if err != nil {
		return err
	}
	if _, err := l.commitLocked([]item{{typ: TypeSigningDisabled, fields: fields}}); err != nil {
		return err
	}
	l.setKeyLocked(nil)
	l.log.Warn("audit signing turned off; events from now on carry no signature", "reason", reason, "seq", w.seq)
	return nil
}

// enableLocked sets key and, when unsigned events precede, writes a signed
// signing_enabled closing them.
func (l *Log) enableLocked(key []byte) error {
	w := &l.w
	if w.failed != nil {
		return w.failed
	}
	if w.key != nil {
		if hmac.Equal(w.key, key) {
			return nil
		}
		return fmt.Errorf("%w: the log is signed with another key", ErrInvalid)
	}
	l.setKeyLocked(key)
	if w.seq == 0 || w.signed {
		return nil
	}
	fields, err := canonicalFields(SigningEnabled{UnsignedThrough: w.seq})
	if err != nil {
		return err
	}
	// On failure the key stays: Recover finds the signing_enabled on disk,
	// or writes it (load), so that signing resumes either way.
	if _, err := l.commitLocked([]item{{typ: TypeSigningEnabled, fields: fields}}); err != nil {
		return err
	}
	l.log.Info("audit signing turned on", "seq", w.seq)
	return nil
}

// commitLocked writes items as consecutive events with one write and one
// sync (fdatasync on Linux, F_FULLFSYNC on macOS) without letting go of
// wmu, which also makes the events written before them durable. Control
// requests and Open use it; the events of callers are written by
// appendNow, which syncs outside wmu. On failure the Log fails closed.
func (l *Log) commitLocked(items []item) ([]Event, error) {
	evs, err := l.writeTierLocked(items, true)
	if err != nil {
		return nil, err
	}
	if err := l.syncLocked(); err != nil {
		return nil, err
	}
	return evs, nil
}

// writeTierLocked writes items after the swap check, without a sync;
// syncs says one follows (head.json is checked too). The events it returns
// are in a buffer the next commit reuses.
func (l *Log) writeTierLocked(items []item, syncs bool) ([]Event, error) {
	w := &l.w
	if w.failed != nil {
		return nil, w.failed
	}
	// A stat of each file per commit: a file replaced (cp + mv) or
	// deleted under the writer would otherwise take every later event
	// with it. head.json only when this commit syncs (it is written
	// after a sync only); the group commit checks it before its sync.
	if files := l.swappedLocked(syncs); len(files) > 0 {
		if err := l.tamperedLocked(files, ""); err != nil {
			return nil, err
		}
	}
	evs, err := l.commitCheckedLocked(items, false)
	if err == nil && !syncs {
		l.pendingLocked() // no sync follows: the group commit's
	}
	return evs, err
}

// commitCheckedLocked is writeTierLocked after the swap check (and a sync
// holding wmu when durable is set). The events it returns are in a buffer
// of the writer that the next commit reuses.
func (l *Log) commitCheckedLocked(items []item, durable bool) ([]Event, error) {
	w := &l.w
	if w.failed != nil {
		return nil, w.failed
	}
	w.buf = w.buf[:0]
	evs := slices.Grow(w.evs[:0], len(items))[:len(items)]
	w.evs = evs
	seq, prev, signed := w.seq, w.prev, w.signed
	for i, it := range items {
		seq++
		ts := it.ts
		if ts.IsZero() {
			ts = l.opts.Clock().UTC()
		}
		enc := w.enc
		if it.unsigned {
			enc = w.plain
		}
		var h, sig string
		w.buf, h, sig = enc.appendLine(w.buf, seq, ts, it.typ, it.fields, prev)
		evs[i] = Event{Seq: seq, TS: ts, Type: it.typ, Fields: it.fields, Prev: prev, Hash: h, Sig: sig}
		prev, signed = h, signsNext(sig, it.typ)
	}
	if w.size > 0 && w.size+int64(len(w.buf)) > l.opts.MaxFileBytes {
		if err := l.rotateLocked(); err != nil {
			return nil, l.failLocked("rotating", err)
		}
	}
	n, err := l.opts.hooks.write(w.f, w.buf)
	w.size += int64(n)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return nil, l.failLocked("writing "+w.f.Name(), err)
	}
	if w.seq == 0 {
		w.genesis, w.genesisTS = evs[0].Hash, evs[0].TS.Format(tsLayout)
	}
	w.seq, w.prev, w.signed = seq, prev, signed
	w.sinceSeal = true
	if w.written == w.synced {
		w.pendSince = time.Now()
	}
	w.written += uint64(len(evs))
	w.lastEv = evs[len(evs)-1]
	if o := l.opts.Observer; o != nil {
		for _, ev := range evs {
			o.Observe(ev)
		}
	}
	if durable {
		if err := l.syncLocked(); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

// syncLocked makes every event written so far durable, holding wmu
// throughout, and then names the last of them in head.json.
func (l *Log) syncLocked() error {
	w := &l.w
	if err := l.opts.hooks.sync(w.f); err != nil {
		return l.failLocked("syncing "+w.f.Name(), err)
	}
	l.syncedLocked(w.written, w.lastEv)
	return nil
}

// syncPendingLocked is the group commit of record-tier events: it syncs
// them when some are waiting and the Log has not failed.
// It syncs as a leader of the group commit (awaitSyncLocked), so a sync
// already running for authority events is shared, not repeated.
func (l *Log) syncPendingLocked() {
	if l.w.unsyncedLocked() == 0 || l.w.failed != nil || l.w.f == nil {
		return
	}
	if files := l.swappedLocked(true); len(files) > 0 {
		// The waiting events are synced (best effort) in the file they
		// were written to, and log_tampered, durable, starts a new one.
		_ = l.tamperedLocked(files, "")
		return
	}
	_ = l.awaitSyncLocked(l.w.written)
}

func (l *Log) failLocked(op string, err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err // op names the file already
	}
	l.w.failed = fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	failed := l.w.failed
	l.failed.Store(&failed)
	// Written events that no sync covered may be lost: their waiters fail.
	for _, sw := range l.w.waiters {
		sw.done, sw.err = true, failed
	}
	l.dropWaitersLocked(len(l.w.waiters))
	l.log.Error("audit log failed; refusing further events until recovered", "op", op, "err", err)
	return l.w.failed
}

// rotateLocked starts the next file. It never reuses an existing file.
func (l *Log) rotateLocked() error {
	w := &l.w
	next := w.fileNum + 1
	f, err := l.opts.hooks.open(filepath.Join(l.opts.Dir, fileName(next)), os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(l.opts.Dir); err != nil {
		f.Close()
		return err
	}
	if w.unsyncedLocked() > 0 {
		// Events in the file being closed: durable first.
		if err := l.opts.hooks.sync(w.f); err != nil {
			f.Close()
			return err
		}
		l.syncedLocked(w.written, w.lastEv)
	}
	l.retireLocked(w.f)
	l.log.Info("audit log rotated", "file", fileName(next), "afterSeq", w.seq)
	w.f, w.fileNum, w.size = f, next, 0
	w.fInfo, _ = f.Stat()
	return nil
}

// writeHeadLocked replaces head.json with the last committed event. It is
// not fsynced: after a crash it may be older than the log or empty, which
// Verify tolerates, but it is written only after the events it names are
// durable, so it is never ahead of the log.
func (l *Log) writeHeadLocked(ev Event) {
	w := &l.w
	w.headBuf = append(w.headBuf[:0], `{"hash":"`...)
	w.headBuf = append(w.headBuf, ev.Hash...)
	w.headBuf = append(w.headBuf, `","seq":`...)
	w.headBuf = fmt.Appendf(w.headBuf, "%d", ev.Seq)
	if ev.Sig != "" {
		w.headBuf = append(w.headBuf, `,"sig":"`...)
		w.headBuf = append(w.headBuf, ev.Sig...)
		w.headBuf = append(w.headBuf, '"')
	}
	w.headBuf = append(w.headBuf, '}')
	for len(w.headBuf) < headSize-1 {
		w.headBuf = append(w.headBuf, ' ')
	}
	w.headBuf = append(w.headBuf, '\n')
	// Overwritten in place (one pwrite, no rename): this runs after every
	// commit, on the path of every tool call. A crash mid-write leaves a
	// head that does not parse, which Verify treats as absent.
	var err error
	if w.headF == nil {
		w.headF, err = os.OpenFile(filepath.Join(l.opts.Dir, headName), os.O_RDWR|os.O_CREATE, 0o600)
		if err == nil {
			err = w.headF.Truncate(0)
		}
		if err == nil {
			w.headInfo, err = w.headF.Stat()
		}
	}
	if err == nil {
		_, err = w.headF.WriteAt(w.headBuf, 0)
	}
	if err != nil {
		l.log.Warn("writing audit head", "err", err)
	}
}

func (l *Log) recoverLocked() error {
	if l.w.failed == nil && l.w.unsyncedLocked() > 0 && l.w.f != nil {
		// A healthy log: what its waiters wait for is synced first.
		if err := l.syncLocked(); err != nil {
			return err
		}
	}
	if l.w.f != nil {
		l.retireLocked(l.w.f)
		l.w.f = nil
	}
	l.w.failed = nil
	l.w.synced = l.w.written // the file is read again: what is in it is the log
	l.w.pendSince = time.Time{}
	l.failed.Store(nil)
	if err := l.load(); err != nil {
		if l.w.failed == nil {
			l.w.failed = err
			l.failed.Store(&err)
		}
		return l.w.failed
	}
	l.log.Info("audit log recovered", "seq", l.w.seq)
	return nil
}

// load opens the last file, finds the last whole event (looking into earlier
// files when the last one has none) and records a torn tail. Called by Open
// and by the writer goroutine.
func (l *Log) load() error {
	w := &l.w
	dir := l.opts.Dir
	files, err := listFiles(dir)
	if err != nil {
		return fmt.Errorf("%w: listing %s: %w", ErrUnavailable, dir, err)
	}
	w.seq, w.prev, w.signed = 0, Genesis, false
	if len(files) == 0 {
		f, err := l.opts.hooks.open(filepath.Join(dir, fileName(1)), os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
		if err == nil {
			err = syncDir(dir)
		}
		if err != nil {
			return fmt.Errorf("%w: creating %s: %w", ErrUnavailable, fileName(1), err)
		}
		w.f, w.fileNum, w.size = f, 1, 0
		w.fInfo, _ = f.Stat()
		w.genesis, w.genesisTS = "", ""
		return nil
	}
	last := files[len(files)-1]
	f, err := l.opts.hooks.open(last.path, os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%w: opening %s: %w", ErrUnavailable, last.name, err)
	}
	w.f, w.fileNum = f, last.num
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrUnavailable, last.name)
	}
	if st.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			l.log.Warn("tightening audit file mode", "file", last.name, "err", err)
		}
	}
	w.size = st.Size()
	w.fInfo = st
	w.genesis, w.genesisTS = "", ""
	_ = forEachEventInFile(files[0].path, 0, func(e Event) error {
		if e.Seq == 1 {
			w.genesis, w.genesisTS = e.Hash, e.TS.Format(tsLayout)
		}
		return errStop
	})
	if pt, err := pendingTamper(last.path); err == nil {
		l.tamper.Store(pt)
	}
	t, err := scanTail(f, w.size)
	if err != nil {
		return fmt.Errorf("%w: reading %s: %w", ErrUnavailable, last.name, err)
	}
	if t.found {
		w.seq, w.prev, w.signed = t.seq, t.hash, signsNext(t.sig, t.typ)
		w.lastSeal = t.fields
	} else {
		for i := len(files) - 2; i >= 0; i-- {
			pt, err := scanFileTail(files[i].path)
			if err != nil {
				return fmt.Errorf("%w: reading %s: %w", ErrUnavailable, files[i].name, err)
			}
			if pt.found {
				w.seq, w.prev, w.signed = pt.seq, pt.hash, signsNext(pt.sig, pt.typ)
				break
			}
		}
	}
	needSigning := w.key != nil && w.seq > 0 && !w.signed
	if w.key == nil && w.signed {
		l.log.Warn("audit log opened without a key after signed events; new events are unsigned")
	}
	var items []item
	switch {
	case t.goodEnd < w.size:
		torn, err := digestRange(f, t.goodEnd, w.size-t.goodEnd)
		if err != nil {
			return fmt.Errorf("%w: reading torn tail of %s: %w", ErrUnavailable, last.name, err)
		}
		hd, _, _ := readHead(dir)
		rec := LogRecovered{File: last.name, Offset: t.goodEnd, Length: w.size - t.goodEnd, Digest: torn.digest, After: w.seq, HeadSeq: hd.Seq, Complete: torn.wholeLines}
		if !torn.endsWithNewline {
			if err := l.writeRawLocked([]byte{'\n'}); err != nil {
				return err
			}
		}
		l.log.Warn("audit log had a torn tail; recording log_recovered", "file", last.name, "offset", rec.Offset, "length", rec.Length, "after", rec.After)
		if hd.Seq > w.seq {
			l.log.Error("audit head names events that are no longer in the log", "headSeq", hd.Seq, "lastSeq", w.seq)
		}
		fields, _ := json.Marshal(rec)
		canon, _ := canonicalFields(json.RawMessage(fields))
		items = append(items, item{typ: TypeLogRecovered, fields: canon, unsigned: needSigning})
	case t.unterminated:
		if err := l.writeRawLocked([]byte{'\n'}); err != nil {
			return err
		}
	}
	if needSigning {
		fields, _ := canonicalFields(SigningEnabled{UnsignedThrough: w.seq + uint64(len(items))})
		items = append(items, item{typ: TypeSigningEnabled, fields: fields})
	}
	if len(items) > 0 {
		if _, err := l.commitLocked(items); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) writeRawLocked(b []byte) error {
	n, err := l.opts.hooks.write(l.w.f, b)
	l.w.size += int64(n)
	if err == nil {
		err = l.opts.hooks.sync(l.w.f)
	}
	if err != nil {
		return l.failLocked("writing "+l.w.f.Name(), err)
	}
	return nil
}

type tornRange struct {
	digest          string
	endsWithNewline bool
	wholeLines      bool // a newline inside: whole lines that are not events
}

// digestRange returns the SHA-256 ("sha256:<hex>") of n bytes at off of f;
// when they end with a newline that the recovery did not add, it is part of
// the digest.
func digestRange(f *os.File, off, n int64) (tornRange, error) {
	h := sha256.New()
	nl := &newlineCounter{}
	if _, err := io.Copy(io.MultiWriter(h, nl), io.NewSectionReader(f, off, n)); err != nil {
		return tornRange{}, err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], off+n-1); err != nil {
		return tornRange{}, err
	}
	return tornRange{digest: hashPrefix + hex.EncodeToString(h.Sum(nil)), endsWithNewline: last[0] == '\n', wholeLines: nl.n > 0}, nil
}

// tail describes the end of a log file.
type tail struct {
	found        bool
	seq          uint64
	typ          string
	fields       []byte // of a log_sealed last event only
	hash, sig    string
	goodEnd      int64 // offset just past the last whole event (and its newline)
	unterminated bool  // the last event lacks its newline (goodEnd == size)
}

func scanFileTail(path string) (tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return tail{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return tail{}, err
	}
	return scanTail(f, st.Size())
}

// scanTail finds the last line of f (size bytes) that is a whole event whose
// hash matches its content, reading backwards in growing windows.
func scanTail(f io.ReaderAt, size int64) (tail, error) {
	window := int64(64 << 10)
	enc := newEncoder(nil)
	for {
		if window > size {
			window = size
		}
		base := size - window
		buf := make([]byte, window)
		if _, err := f.ReadAt(buf, base); err != nil && err != io.EOF {
			return tail{}, err
		}
		e, term := len(buf), false
		if e > 0 && buf[e-1] == '\n' {
			e, term = e-1, true
		}
		for {
			s := bytes.LastIndexByte(buf[:e], '\n') + 1
			if s == 0 && base > 0 {
				break // the line may start before the window
			}
			if l, err := parseLine(buf[s:e]); err == nil && enc.hashIs(l.prev, l.open, l.hash) {
				t := tail{found: true, seq: l.seq, typ: l.typ, hash: l.hash, sig: l.sig, goodEnd: base + int64(e), unterminated: !term}
				if l.typ == TypeLogSealed {
					t.fields = bytes.Clone(l.fields)
				}
				if term {
					t.goodEnd++
				}
				return t, nil
			}
			if s == 0 {
				return tail{}, nil // no whole event in the file
			}
			e, term = s-1, true
		}
		window *= 2
	}
}

// signsNext reports whether the event after one with signature sig and
// type typ must be signed: it is signed and does not turn signing off.
func signsNext(sig, typ string) bool { return sig != "" && typ != TypeSigningDisabled }

// newlineCounter counts the newlines written to it.
type newlineCounter struct{ n int }

func (c *newlineCounter) Write(p []byte) (int, error) {
	c.n += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}
