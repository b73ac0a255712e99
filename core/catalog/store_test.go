package catalog

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/portcullis/portcullis/core/ids"
)

// fakeClock returns t0, t0+1s, t0+2s, … on successive calls.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func parseTools(t *testing.T, tools ...string) []Tool {
	t.Helper()
	ts, err := Parse(raws(`{"tools":[` + strings.Join(tools, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestStoreRevisionsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: t0}
	s, err := OpenStore(dir, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	a := tool("a", `{"type":"object"}`, `, "x-keep" : [1.50]`)
	b := tool("b", `{}`, "")
	steps := []struct {
		epoch       ids.EpochID
		tools       []string
		wantRev     uint64
		wantChanged bool
	}{
		{"E1", []string{a}, 1, true},
		{"E2", []string{a}, 1, false},    // new epoch, same catalog
		{"E2", []string{a, b}, 2, true},  // tool added
		{"E3", []string{b, a}, 2, false}, // reordered only
		{"E3", []string{tool("a", `{"type":"object"}`, `,"x-keep":[1.5],"annotations":{"readOnlyHint":false}`), b}, 2, false}, // default spelled out
	}
	for i, st := range steps {
		cur, changed, err := s.Update("inventory-local", st.epoch, parseTools(t, st.tools...))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if cur.Revision != st.wantRev || changed != st.wantChanged || cur.Epoch != st.epoch {
			t.Errorf("step %d: revision %d changed %v epoch %s, want %d %v %s", i, cur.Revision, changed, cur.Epoch, st.wantRev, st.wantChanged, st.epoch)
		}
		if want := t0.Add(time.Duration(i+1) * time.Second); !cur.FetchedAt.Equal(want) {
			t.Errorf("step %d: FetchedAt %v, want %v", i, cur.FetchedAt, want)
		}
	}
	before, _ := s.Current("inventory-local")

	fi, err := os.Stat(filepath.Join(dir, "inventory-local.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}

	s2, err := OpenStore(dir, WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	after, ok := s2.Current("inventory-local")
	if !ok {
		t.Fatal("no current revision after reopen")
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("reopened current (-before +after):\n%s", diff)
	}
	if got := string(after.ListResult(nil)); got != `{"tools":[`+a+`,`+b+`]}` {
		t.Errorf("ListResult after reopen = %s", got)
	}
	if r1, ok := s2.Get("inventory-local", 1); !ok || len(r1.Tools) != 1 {
		t.Errorf("Get(1) = %v, %v", r1, ok)
	}
	cur, changed, err := s2.Update("inventory-local", "E4", parseTools(t, b))
	if err != nil || !changed || cur.Revision != 3 {
		t.Errorf("update after reopen: revision %d changed %v err %v, want 3 true", cur.Revision, changed, err)
	}
	if diff := cmp.Diff([]string{"inventory-local"}, s2.Labels()); diff != "" {
		t.Errorf("Labels (-want +got):\n%s", diff)
	}
}

func TestStoreHistoryLimit(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, WithHistory(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		desc := `,"description":"v` + string(rune('0'+i)) + `"`
		if _, _, err := s.Update("l", "E", parseTools(t, tool("a", `{}`, desc))); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]uint64{3, 4, 5}, s.Revisions("l")); diff != "" {
		t.Errorf("Revisions (-want +got):\n%s", diff)
	}
	if _, ok := s.Get("l", 2); ok {
		t.Error("revision 2 still kept")
	}
	s2, err := OpenStore(dir, WithHistory(3))
	if err != nil {
		t.Fatal(err)
	}
	cur, _, err := s2.Update("l", "E", parseTools(t, tool("a", `{}`, `,"description":"v9"`)))
	if err != nil || cur.Revision != 6 {
		t.Errorf("next revision %d, %v; want 6", cur.Revision, err)
	}
	old, _ := s2.Get("l", 5)
	d := Compare(old, cur)
	if len(d.Changes) != 1 || d.Changes[0].Kind != KindDescriptionChanged {
		t.Errorf("diff 5→6: %s", d.Text())
	}
}

func TestStoreLabelsAreEscaped(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	labels := []string{"../escape", ".hidden", "a b/c", "plain-label_1"}
	for _, l := range labels {
		if _, _, err := s.Update(l, "E", parseTools(t, tool("a", `{}`, ""))); err != nil {
			t.Fatalf("Update(%q): %v", l, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	var files []string
	for _, e := range ents {
		files = append(files, e.Name())
	}
	want := []string{"%2E%2E%2Fescape.json", "%2Ehidden.json", "a%20b%2Fc.json", "plain-label_1.json"}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	s2, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"../escape", ".hidden", "a b/c", "plain-label_1"}, s2.Labels()); diff != "" {
		t.Errorf("Labels after reopen (-want +got):\n%s", diff)
	}
	if _, _, err := s.Update("", "E", nil); !errors.Is(err, ErrBadLabel) {
		t.Errorf("empty label err = %v", err)
	}
}

func TestStoreRejectsTamperedFile(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Update("l", "E", parseTools(t, tool("a", `{}`, `,"description":"safe"`))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "l.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Swap the stored raw tool (base64) for another one with the old digest.
	tampered := strings.Replace(string(b), b64(tool("a", `{}`, `,"description":"safe"`)), b64(tool("a", `{}`, `,"description":"evil"`)), 1)
	if tampered == string(b) {
		t.Fatal("raw tool not found in file")
	}
	if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OpenStore err = %v, want ErrCorrupt", err)
	}
	if err := os.WriteFile(path, []byte(`{"format":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("OpenStore err = %v, want ErrCorrupt", err)
	}
}

func TestStoreRemovesTempFilesAndKeepsStateOnWriteError(t *testing.T) {
	dir := t.TempDir()
	leftover := filepath.Join(dir, ".l.json.tmp-123")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover temp file: %v", err)
	}
	if _, _, err := s.Update("l", "E1", parseTools(t, tool("a", `{}`, ""))); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Update("l", "E2", parseTools(t, tool("b", `{}`, ""))); err == nil {
		t.Fatal("Update succeeded without a directory")
	}
	cur, _ := s.Current("l")
	if cur.Revision != 1 || cur.Epoch != "E1" {
		t.Errorf("after failed write: revision %d epoch %s, want 1 E1", cur.Revision, cur.Epoch)
	}
}

func TestStoreConcurrentUpdates(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			desc := `,"description":"` + string(rune('a'+i)) + `"`
			if _, _, err := s.Update("shared", "E", parseTools(t, tool("a", `{}`, desc))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5, 6, 7, 8}, s.Revisions("shared")); diff != "" {
		t.Errorf("Revisions (-want +got):\n%s", diff)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
