package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// Readers (Tail, Follow, Sessions, Activity) parse lines without checking
// hashes or signatures (Verify does that) and skip lines that are not events.

// Tail returns the last n events of the log in dir, oldest first (fewer when
// the log holds fewer; none for n <= 0).
func Tail(dir string, n int) ([]Event, error) {
	if n <= 0 {
		return nil, nil
	}
	files, err := listFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: reading %s: %w", dir, err)
	}
	var out []Event
	for i := len(files) - 1; i >= 0 && len(out) < n; i-- {
		var evs []Event
		err := forEachEventInFile(files[i].path, 0, func(e Event) error {
			evs = append(evs, e)
			if len(evs) > n {
				evs = evs[1:]
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(evs, out...)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// HasSigned reports whether any event of the log in dir carries a signature,
// reading from the start up to the first that does (a log whose signing was
// turned off may end unsigned, and a new key would not verify its earlier
// events). The error wraps fs.ErrNotExist when dir does not exist.
func HasSigned(dir string) (bool, error) {
	found := false
	err := forEachEvent(dir, func(e Event) error {
		if e.Sig != "" {
			found = true
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, err
	}
	return found, nil
}

// HasType reports whether any event of the log in dir has type typ,
// reading from the start up to the first that does. The error wraps
// fs.ErrNotExist when dir does not exist.
func HasType(dir, typ string) (bool, error) {
	found := false
	err := forEachEvent(dir, func(e Event) error {
		if e.Type == typ {
			found = true
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, err
	}
	return found, nil
}

// EventsOfType returns every event of the log in dir whose type is typ, in
// order. The error wraps fs.ErrNotExist when dir does not exist.
func EventsOfType(dir, typ string) ([]Event, error) {
	var out []Event
	err := forEachEvent(dir, func(e Event) error {
		if e.Type == typ {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// followInterval is how often Follow looks for new lines.
var followInterval = 200 * time.Millisecond

// Follow sends to out every event with Seq >= from, in order, as it appears
// in the log in dir, following rotation into new files, until ctx ends; it
// then returns ctx.Err(). Only newline-terminated lines are read, so a line
// being written is never seen half. It polls every 200 ms. Other errors
// (the directory cannot be read) end it early.
func Follow(ctx context.Context, dir string, from uint64, out chan<- Event) error {
	files, err := listFiles(dir)
	if err != nil {
		return fmt.Errorf("audit: reading %s: %w", dir, err)
	}
	// Start in the last file whose first event is not after from.
	cur, off := 1, int64(0)
	for _, lf := range files {
		if s, ok := firstSeq(lf.path); ok && s <= from {
			cur = lf.num
		}
	}
	if len(files) > 0 && cur < files[0].num {
		cur = files[0].num
	}
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		// The writer creates file cur+1 only after its last write to cur,
		// so once cur+1 exists, reading cur to its end reads all of it.
		_, statErr := os.Stat(fileNamePath(dir, cur+1))
		off, err = followFile(ctx, dir, cur, off, &from, out)
		if err != nil {
			return err
		}
		if statErr == nil {
			cur, off = cur+1, 0
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func fileNamePath(dir string, n int) string { return filepath.Join(dir, fileName(n)) }

// followFile sends the events of whole lines of file n from off on and
// returns the offset after the last whole line.
func followFile(ctx context.Context, dir string, n int, off int64, from *uint64, out chan<- Event) (int64, error) {
	f, err := os.Open(fileNamePath(dir, n))
	if os.IsNotExist(err) {
		return off, nil
	}
	if err != nil {
		return off, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, fmt.Errorf("audit: %w", err)
	}
	lr := newLineReader(f, off)
	for {
		b, start, term, err := lr.next()
		if err == io.EOF || err == nil && !term {
			return off, nil
		}
		if err != nil {
			return off, fmt.Errorf("audit: reading %s: %w", f.Name(), err)
		}
		off = start + int64(len(b)) + 1
		l, err := parseLine(b)
		if err != nil || l.seq < *from {
			continue
		}
		ev, err := l.event()
		if err != nil {
			continue
		}
		select {
		case out <- ev:
			*from = ev.Seq + 1
		case <-ctx.Done():
			return off, ctx.Err()
		}
	}
}

func firstSeq(path string) (uint64, bool) {
	var seq uint64
	found := false
	_ = forEachEventInFile(path, 0, func(e Event) error {
		seq, found = e.Seq, true
		return errStop
	})
	return seq, found
}

// Filter selects the sessions or calls of one server label and/or one agent
// run; empty fields match everything. Limit > 0 keeps only the most recent
// Limit results.
type Filter struct {
	Server string
	Run    ids.RunID
	Limit  int
}

func (f Filter) match(server string, run ids.RunID) bool {
	return (f.Server == "" || f.Server == server) && (f.Run == "" || f.Run == run)
}

// Session is one agent run as the log tells it.
type Session struct {
	AgentRun    ids.RunID
	ServerLabel string
	Agent       Agent
	Started     time.Time // zero when run_started is not in the log
	Ended       time.Time // zero while the run is open (or ended without run_ended)
	EndReason   string
	StartSeq    uint64 // first event of the run
	EndSeq      uint64 // run_ended event, 0 if none
	Grants      []Grant
	Calls       int // tool_called events
	Denied      int // authorization_denied events
}

// Grant is an approval granted during a session.
type Grant struct {
	Seq             uint64
	TS              time.Time
	Request         ids.RequestID
	Epoch           ids.EpochID
	ToolScope       []string
	CredentialScope []string
	ExpiresWhen     string
}

// Sessions returns the agent runs recorded in the log in dir, in the order
// they first appear, with their grants (approval_granted events).
func Sessions(dir string, f Filter) ([]Session, error) {
	var order []ids.RunID
	byRun := map[ids.RunID]*Session{}
	get := func(run ids.RunID, server string, e Event) *Session {
		s := byRun[run]
		if s == nil {
			s = &Session{AgentRun: run, ServerLabel: server, StartSeq: e.Seq}
			byRun[run] = s
			order = append(order, run)
		}
		return s
	}
	err := forEachEvent(dir, func(e Event) error {
		switch e.Type {
		case TypeRunStarted:
			var v RunStarted
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			s := get(v.AgentRun, v.ServerLabel, e)
			s.Agent, s.Started = v.Agent, e.TS
		case TypeRunEnded:
			var v RunEnded
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			s := get(v.AgentRun, v.ServerLabel, e)
			s.Ended, s.EndReason, s.EndSeq = e.TS, v.Reason, e.Seq
		case TypeApprovalGranted:
			var v ApprovalGranted
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			s := get(v.AgentRun, v.ServerLabel, e)
			s.Grants = append(s.Grants, Grant{Seq: e.Seq, TS: e.TS, Request: v.Request, Epoch: v.Epoch, ToolScope: v.ToolScope, CredentialScope: v.CredentialScope, ExpiresWhen: v.ExpiresWhen})
		case TypeToolCalled:
			var v ToolCalled
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			get(v.AgentRun, v.ServerLabel, e).Calls++
		case TypeAuthorizationDenied:
			var v AuthorizationDenied
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			get(v.AgentRun, v.ServerLabel, e).Denied++
		case TypeCallRefused:
			var v CallRefused
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			get(v.AgentRun, v.ServerLabel, e).Denied++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Session, 0, len(order))
	for _, run := range order {
		out = append(out, *byRun[run])
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, nil
}

// Call is one tool call as the log tells it: a tool_called intent joined with
// its tool_completed (by agent run and call id), or a refusal recorded by
// call_refused (or, in older logs, authorization_denied): Decision "denied",
// Reason the refusal's kind.
type Call struct {
	Seq             uint64 // tool_called or authorization_denied event
	TS              time.Time
	Call            ids.CallID
	AgentRun        ids.RunID
	ServerLabel     string
	Tool            string
	Epoch           ids.EpochID
	CatalogRevision uint64
	Decision        string // "allow", "grant" or "denied"
	Grant           ids.GrantID
	Reason          string
	ArgsDigest      string
	ArgKeys         []string
	Completed       bool // a tool_completed event was found
	CompletedSeq    uint64
	Outcome         string
	Duration        time.Duration
	Error           string
}

// callKey names a call of the log: its agent run and call id.
type callKey struct {
	run  ids.RunID
	call ids.CallID
}

// Activity returns the tool calls and refusals recorded in the log in dir, in
// log order.
func Activity(dir string, f Filter) ([]Call, error) {
	var calls []Call
	open := map[callKey]int{} // (agentRun, call) → index in calls
	err := forEachEvent(dir, func(e Event) error {
		switch e.Type {
		case TypeToolCalled:
			var v ToolCalled
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			open[callKey{v.AgentRun, v.Call}] = len(calls)
			calls = append(calls, Call{Seq: e.Seq, TS: e.TS, Call: v.Call, AgentRun: v.AgentRun, ServerLabel: v.ServerLabel,
				Tool: v.Tool, Epoch: v.Epoch, CatalogRevision: v.CatalogRevision, Decision: v.Decision, Grant: v.Grant,
				ArgsDigest: v.ArgsDigest, ArgKeys: v.ArgKeys})
		case TypeToolCompleted:
			var v ToolCompleted
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			key := callKey{v.AgentRun, v.Call}
			i, ok := open[key]
			if !ok {
				return nil
			}
			delete(open, key)
			c := &calls[i]
			c.Completed, c.CompletedSeq, c.Outcome, c.Error = true, e.Seq, v.Outcome, v.Error
			c.Duration = time.Duration(v.DurationMS * float64(time.Millisecond))
		case TypeAuthorizationDenied:
			var v AuthorizationDenied
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			calls = append(calls, Call{Seq: e.Seq, TS: e.TS, Call: v.Call, AgentRun: v.AgentRun, ServerLabel: v.ServerLabel,
				Tool: v.Tool, Epoch: v.CurrentEpoch, CatalogRevision: v.CatalogRevision, Decision: "denied", Reason: v.Reason})
		case TypeCallRefused:
			var v CallRefused
			if e.DecodeFields(&v) != nil || !f.match(v.ServerLabel, v.AgentRun) {
				return nil
			}
			epoch := v.Epoch
			if epoch == "" {
				epoch = v.CurrentEpoch
			}
			calls = append(calls, Call{Seq: e.Seq, TS: e.TS, Call: v.Call, AgentRun: v.AgentRun, ServerLabel: v.ServerLabel,
				Tool: v.Tool, Epoch: epoch, CatalogRevision: v.CatalogRevision, Decision: "denied", Reason: v.Kind})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.Limit > 0 && len(calls) > f.Limit {
		calls = calls[len(calls)-f.Limit:]
	}
	return calls, nil
}

// HasEvent reports whether the log in dir holds the event seq with hash
// hash, looking in file (a base name, such as an Anchor's File) first and
// then in every file.
func HasEvent(dir, file string, seq uint64, hash string) (bool, error) {
	_, found, err := FindEvent(dir, file, seq, hash)
	return found, err
}

// FindEvent is HasEvent that also returns the event found. It reads only
// the log's own files (numbered from 1 without a gap) and finds an event
// only where the chain holds around it: its line hashes to its hash, its
// prev is the hash of the event before it (the last of the file before,
// or the genesis), and the event after it, if any, names it as prev. A
// line written beside the log, or edited in place with its hash computed
// again, is not found: what names it (a standing approval, a run record)
// is then not believed. A consistent rewrite of the chain from that event
// to the end (and of head.json, for the last event) is beyond what this
// sees (Verify, the seals and the anchor).
func FindEvent(dir, file string, seq uint64, hash string) (Event, bool, error) {
	files, err := listFiles(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("audit: reading %s: %w", dir, err)
	}
	for k, lf := range files {
		if lf.num != k+1 {
			files = files[:k]
			break
		}
	}
	hint := -1
	if file != "" {
		hint = slices.IndexFunc(files, func(lf logFile) bool { return lf.name == filepath.Base(file) })
	}
	order := make([]int, 0, len(files))
	if hint >= 0 {
		order = append(order, hint)
	}
	for k := range files {
		if k != hint {
			order = append(order, k)
		}
	}
	if h, ok, _ := readHead(dir); ok && h.Seq == seq && h.Hash != hash {
		// The last event committed, as head.json records it, is another
		// one: the log's last line was rewritten.
		return Event{}, false, nil
	}
	enc := newEncoder(nil)
	for _, k := range order {
		prev, next := Genesis, ""
		if k > 0 {
			if prev, err = lastHashIn(files[k-1].path); err != nil {
				return Event{}, false, err
			}
		}
		if k+1 < len(files) {
			if next, err = firstPrevIn(files[k+1].path); err != nil {
				return Event{}, false, err
			}
		}
		ev, found, err := findChained(enc, files[k].path, prev, next, seq, hash)
		if err != nil || found {
			return ev, found, err
		}
	}
	return Event{}, false, nil
}

// findChained looks in the log file at path for the event seq with hash,
// chained: prev is the hash of the event before the file's first, next the
// prev of the first event of the file after it ("" when there is none).
func findChained(enc *encoder, path, prev, next string, seq uint64, hash string) (Event, bool, error) {
	var cand *line
	var found Event
	stop := errors.New("found")
	err := forEachLine(path, func(l line) error {
		if cand != nil {
			if l.prev != cand.hash {
				cand = nil
			}
			return stop
		}
		if l.seq == seq && l.hash == hash {
			if l.prev != prev || !enc.hashIs(l.prev, l.open, l.hash) {
				return stop
			}
			ev, err := l.event()
			if err != nil {
				return stop
			}
			c := l
			cand, found = &c, ev
		}
		prev = l.hash
		return nil
	})
	if err != nil && !errors.Is(err, stop) {
		return Event{}, false, err
	}
	if cand == nil {
		return Event{}, false, nil
	}
	if !errors.Is(err, stop) && next != "" && next != cand.hash {
		return Event{}, false, nil // the file's last event, and the next file does not follow it
	}
	return found, true, nil
}

// forEachLine calls fn for every line of the log file at path that parses
// as an event line (torn regions are skipped).
func forEachLine(path string, fn func(line) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	lr := newLineReader(f, 0)
	for {
		b, _, _, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit: reading %s: %w", path, err)
		}
		l, err := parseLine(b)
		if err != nil {
			continue
		}
		if err := fn(l); err != nil {
			return err
		}
	}
}

// lastHashIn is the hash of the last event line of the log file at path.
func lastHashIn(path string) (string, error) {
	last := ""
	err := forEachLine(path, func(l line) error { last = l.hash; return nil })
	return last, err
}

// firstPrevIn is the prev of the first event line of the log file at path.
func firstPrevIn(path string) (string, error) {
	first := ""
	stop := errors.New("first")
	err := forEachLine(path, func(l line) error { first = l.prev; return stop })
	if errors.Is(err, stop) {
		err = nil
	}
	return first, err
}
