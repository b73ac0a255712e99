package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/internal/atomicfile"
)

// DefaultHistory is how many revisions per label a [Store] keeps by default.
const DefaultHistory = 32

// storeFormat is the version of the per-label file layout.
const storeFormat = 1

// Store errors.
var (
	// ErrBadLabel reports an empty server label.
	ErrBadLabel = errors.New("invalid server label")
	// ErrCorrupt reports a catalog file that cannot be read back as written:
	// bad JSON, wrong format version, or digests that do not match the stored
	// tool bytes.
	ErrCorrupt = errors.New("corrupt catalog file")
)

// Store keeps the catalog revisions of every server label and persists them
// under one directory: one file per label, "<escaped label>.json" (bytes
// outside [A-Za-z0-9_-] written as %XX), mode 0600, replaced atomically (temp
// file, fsync, rename, fsync of the directory), so revision numbers survive a
// daemon restart. It is safe for concurrent use.
type Store struct {
	dir     string
	now     func() time.Time
	log     *slog.Logger
	history int

	mu     sync.Mutex
	labels map[string][]Catalog // guarded by mu; oldest first, last is current
}

// StoreOption configures [OpenStore].
type StoreOption func(*Store)

// WithClock sets the clock that stamps FetchedAt (default time.Now).
func WithClock(now func() time.Time) StoreOption { return func(s *Store) { s.now = now } }

// WithStoreLogger sets the logger (default: discard).
func WithStoreLogger(l *slog.Logger) StoreOption { return func(s *Store) { s.log = l } }

// WithHistory sets how many revisions per label are kept (default
// [DefaultHistory]; values below 2 become 2 so a diff is always possible).
func WithHistory(n int) StoreOption {
	return func(s *Store) { s.history = max(n, 2) }
}

// OpenStore opens (creating it with mode 0700 if needed) the directory dir and
// loads every label file in it. Leftover temporary files of an interrupted
// write are removed. Errors: the directory cannot be created or read, or a file
// is unreadable or [ErrCorrupt].
func OpenStore(dir string, opts ...StoreOption) (*Store, error) {
	s := &Store{
		dir:     dir,
		now:     time.Now,
		log:     slog.New(slog.DiscardHandler),
		history: DefaultHistory,
		labels:  make(map[string][]Catalog),
	}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("opening catalog store: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("opening catalog store: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				s.log.Warn("removing leftover catalog temp file", "file", name, "err", err)
			}
			continue
		}
		if e.IsDir() || !strings.HasSuffix(name, ".json") {
			continue
		}
		label, ok := unescapeLabel(strings.TrimSuffix(name, ".json"))
		if !ok {
			continue
		}
		revs, err := readLabelFile(filepath.Join(dir, name), label)
		if err != nil {
			return nil, err
		}
		if len(revs) > 0 {
			s.labels[label] = revs
		}
	}
	return s, nil
}

// Update records the tools of a fresh tools/list fetch for label at epoch.
//
// If the catalog digest equals the current revision's, the revision stays,
// its Epoch and FetchedAt are refreshed and changed is false (the stored tool
// bytes are kept). Otherwise a new revision numbered current+1 (1 for a new
// label) becomes current and changed is true; the oldest revisions beyond the
// history depth are dropped. Tools without a Digest get one computed. The file
// is written before memory changes, so on error the store is unchanged.
// Errors: [ErrBadLabel], [ErrDuplicateTool], [ErrMalformed], write failures.
func (s *Store) Update(label string, epoch ids.EpochID, tools []Tool) (cur Catalog, changed bool, err error) {
	return s.UpdateContract(label, epoch, tools, Extras{})
}

// UpdateContract is [Store.Update] for a fetch of the whole contract: the
// tools and the Extras (instructions, prompts, resources, resource
// templates); the revision's digest is [ContractDigest] of both, so a
// change of any of them is a new revision. Items without a Digest get one.
func (s *Store) UpdateContract(label string, epoch ids.EpochID, tools []Tool, extras Extras) (cur Catalog, changed bool, err error) {
	if label == "" {
		return Catalog{}, false, ErrBadLabel
	}
	ts := make([]Tool, len(tools))
	seen := make(map[string]struct{}, len(tools))
	var repaired []string
	replaced := 0
	for i, t := range tools {
		if _, dup := seen[t.Name]; dup {
			return Catalog{}, false, fmt.Errorf("updating catalog of %q: %w: %q", label, ErrDuplicateTool, t.Name)
		}
		seen[t.Name] = struct{}{}
		if t.Replaced > 0 {
			repaired = append(repaired, t.Name)
			replaced += t.Replaced
		}
		if t.Digest == "" {
			d, err := ToolDigest(t.Raw)
			if err != nil {
				return Catalog{}, false, fmt.Errorf("updating catalog of %q: tool %q: %w", label, t.Name, err)
			}
			t.Digest = d
		}
		ts[i] = t
	}
	if len(repaired) > 0 {
		s.log.Warn("tools/list held strings that are not valid Unicode (invalid UTF-8 or lone surrogate escapes); replaced by U+FFFD in the catalog and in what the agent gets",
			"label", label, "epoch", epoch, "tools", repaired, "replaced", replaced)
	}
	x := Extras{Instructions: extras.Instructions}
	for _, l := range extraLists {
		items := slices.Clone(*l.get(&extras))
		for i := range items {
			if items[i].Digest == "" {
				d, err := ItemDigest(items[i].Raw)
				if err != nil {
					return Catalog{}, false, fmt.Errorf("updating catalog of %q: %s %q: %w", label, l.What, items[i].Name, err)
				}
				items[i].Digest = d
			}
		}
		*l.get(&x) = items
	}
	digest := ContractDigest(ts, x)
	now := s.now()

	s.mu.Lock()
	defer s.mu.Unlock()
	revs := s.labels[label]
	next := slices.Clone(revs)
	if n := len(next); n > 0 && next[n-1].Digest == digest {
		next[n-1].Epoch = epoch
		next[n-1].FetchedAt = now
	} else {
		var rev uint64 = 1
		if n > 0 {
			rev = next[n-1].Revision + 1
		}
		next = append(next, Catalog{Label: label, Revision: rev, Digest: digest, Tools: ts, FetchedAt: now, Epoch: epoch, Extras: x})
		changed = true
		if len(next) > s.history {
			next = next[len(next)-s.history:]
		}
	}
	if err := s.writeLocked(label, next); err != nil {
		return Catalog{}, false, err
	}
	s.labels[label] = next
	cur = next[len(next)-1]
	if changed {
		s.log.Info("catalog revised", "label", label, "revision", cur.Revision, "digest", cur.Digest, "epoch", epoch, "tools", len(ts))
	}
	return cloneCatalog(cur), changed, nil
}

// Current returns the current revision of label.
func (s *Store) Current(label string) (Catalog, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	revs := s.labels[label]
	if len(revs) == 0 {
		return Catalog{}, false
	}
	return cloneCatalog(revs[len(revs)-1]), true
}

// Get returns revision rev of label, if it is still kept.
func (s *Store) Get(label string, rev uint64) (Catalog, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.labels[label] {
		if c.Revision == rev {
			return cloneCatalog(c), true
		}
	}
	return Catalog{}, false
}

// Revisions returns the revision numbers kept for label, oldest first.
func (s *Store) Revisions(label string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for _, c := range s.labels[label] {
		out = append(out, c.Revision)
	}
	return out
}

// Labels returns the labels that have at least one revision, sorted.
func (s *Store) Labels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.labels))
	for l := range s.labels {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

func cloneCatalog(c Catalog) Catalog {
	c.Tools = slices.Clone(c.Tools)
	c.Prompts, c.Resources, c.Templates = slices.Clone(c.Prompts), slices.Clone(c.Resources), slices.Clone(c.Templates)
	return c
}

// File layout. Raw tool bytes are stored as base64 ([]byte) because
// encoding/json would compact a json.RawMessage and the agent must get the
// server's bytes unchanged.
type fileData struct {
	Format    int            `json:"format"`
	Label     string         `json:"label"`
	Revisions []fileRevision `json:"revisions"`
}

type fileRevision struct {
	Revision  uint64      `json:"revision"`
	Digest    string      `json:"digest"`
	Epoch     ids.EpochID `json:"epoch"`
	FetchedAt time.Time   `json:"fetchedAt"`
	Tools     []fileTool  `json:"tools"`
	// The Extras, absent in files written before them.
	Instructions string     `json:"instructions,omitempty"`
	Prompts      []fileTool `json:"prompts,omitempty"`
	Resources    []fileTool `json:"resources,omitempty"`
	Templates    []fileTool `json:"resourceTemplates,omitempty"`
}

type fileTool struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Raw    []byte `json:"raw"`
}

func (s *Store) writeLocked(label string, revs []Catalog) error {
	fd := fileData{Format: storeFormat, Label: label}
	for _, c := range revs {
		fr := fileRevision{Revision: c.Revision, Digest: c.Digest, Epoch: c.Epoch, FetchedAt: c.FetchedAt}
		for _, t := range c.Tools {
			fr.Tools = append(fr.Tools, fileTool{Name: t.Name, Digest: t.Digest, Raw: t.Raw})
		}
		fr.Instructions = c.Instructions
		for _, it := range []struct {
			from []Tool
			to   *[]fileTool
		}{{c.Prompts, &fr.Prompts}, {c.Resources, &fr.Resources}, {c.Templates, &fr.Templates}} {
			for _, t := range it.from {
				*it.to = append(*it.to, fileTool{Name: t.Name, Digest: t.Digest, Raw: t.Raw})
			}
		}
		fd.Revisions = append(fd.Revisions, fr)
	}
	b, err := json.Marshal(fd)
	if err != nil {
		return fmt.Errorf("saving catalog of %q: %w", label, err)
	}
	name := escapeLabel(label) + ".json"
	if err := atomicfile.Write(filepath.Join(s.dir, name), b, 0o600); err != nil {
		return fmt.Errorf("saving catalog of %q: %w", label, err)
	}
	return nil
}

func readLabelFile(path, label string) ([]Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading catalog file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("reading catalog file %s: %w", filepath.Base(path), err)
	}
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: %s", ErrCorrupt, filepath.Base(path), fmt.Sprintf(format, a...))
	}
	var fd fileData
	if err := json.Unmarshal(b, &fd); err != nil {
		return nil, corrupt("%v", err)
	}
	if fd.Format != storeFormat {
		return nil, corrupt("format %d, want %d", fd.Format, storeFormat)
	}
	if fd.Label != label {
		return nil, corrupt("label %q does not match file name", fd.Label)
	}
	var revs []Catalog
	var last uint64
	for _, fr := range fd.Revisions {
		if fr.Revision <= last {
			return nil, corrupt("revision %d after %d", fr.Revision, last)
		}
		last = fr.Revision
		c := Catalog{Label: label, Revision: fr.Revision, Digest: fr.Digest, Epoch: fr.Epoch, FetchedAt: fr.FetchedAt}
		for _, ft := range fr.Tools {
			d, err := ToolDigest(ft.Raw)
			if err != nil || d != ft.Digest {
				return nil, corrupt("revision %d, tool %q: digest does not match its bytes", fr.Revision, ft.Name)
			}
			c.Tools = append(c.Tools, Tool{Name: ft.Name, Raw: json.RawMessage(ft.Raw), Digest: ft.Digest})
		}
		c.Instructions = fr.Instructions
		for _, it := range []struct {
			from []fileTool
			to   *[]Tool
		}{{fr.Prompts, &c.Prompts}, {fr.Resources, &c.Resources}, {fr.Templates, &c.Templates}} {
			for _, ft := range it.from {
				d, err := ItemDigest(ft.Raw)
				if err != nil || d != ft.Digest {
					return nil, corrupt("revision %d, item %q: digest does not match its bytes", fr.Revision, ft.Name)
				}
				*it.to = append(*it.to, Tool{Name: ft.Name, Raw: json.RawMessage(ft.Raw), Digest: ft.Digest})
			}
		}
		if ContractDigest(c.Tools, c.Extras) != c.Digest {
			return nil, corrupt("revision %d: catalog digest does not match its tools", fr.Revision)
		}
		revs = append(revs, c)
	}
	return revs, nil
}

const hexDigits = "0123456789ABCDEF"

// escapeLabel maps a label to a file name stem: bytes outside [A-Za-z0-9_-]
// become %XX, so no label can name a path outside the directory or a dot file.
func escapeLabel(label string) string {
	var b strings.Builder
	for i := 0; i < len(label); i++ {
		c := label[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// unescapeLabel inverts escapeLabel; ok is false for names it cannot have made.
func unescapeLabel(stem string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(stem); i++ {
		c := stem[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(stem) {
			return "", false
		}
		hi, lo := strings.IndexByte(hexDigits, stem[i+1]), strings.IndexByte(hexDigits, stem[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	l := b.String()
	if l == "" || escapeLabel(l) != stem {
		return "", false
	}
	return l, true
}
