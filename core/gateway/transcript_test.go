package gateway

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/portcullis/portcullis/core/control"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata/transcripts")

// TestTranscripts replays the agent side of each testdata/transcripts/*.txtar
// (its "agent" file: one JSON-RPC line per line; "#" starts a comment, and
// "!end" sends the end-of-input marker) against a Session over a script
// server, and compares what crosses each pipe with its "want" file:
//
//	agent> a line the agent sent
//	server< a line the server process read (in the order it read them)
//	agent< a line the agent got
//
// After each line the agent sends, the bubble goes idle (synctest.Wait)
// before what crossed is written down: the server's lines first, then the
// agent's. go test -run TestTranscripts -update rewrites the want files.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata/transcripts")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ar := parseTxtar(raw)
			agent, ok := ar.file("agent")
			if !ok {
				t.Fatalf("%s has no agent file", file)
			}
			var got string
			synctest.Test(t, func(t *testing.T) { got = replay(t, agent) })
			if *update {
				ar.set("want", got)
				if err := os.WriteFile(file, ar.format(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, _ := ar.file("want")
			if got != want {
				t.Errorf("%s: the transcript differs (go test -run TestTranscripts -update rewrites it)\n--- got\n%s--- want\n%s", file, got, want)
			}
		})
	}
}

// replay runs the agent's lines through a bubble and returns the
// transcript.
func replay(t *testing.T, agent string) string {
	b := startBubble(t, true, nil)
	var out strings.Builder
	agentSeen, serverSeen := 0, 0
	flush := func() {
		synctest.Wait()
		b.launcher.mu.Lock()
		procs := b.launcher.procs
		b.launcher.mu.Unlock()
		b.agent.mu.Lock()
		lines := b.agent.lines[agentSeen:]
		agentSeen = len(b.agent.lines)
		b.agent.mu.Unlock()
		// One process here: a transcript does not restart the server.
		if len(procs) > 0 {
			p := procs[0]
			p.mu.Lock()
			for _, l := range p.wire[serverSeen:] {
				fmt.Fprintf(&out, "server< %s\n", l)
			}
			serverSeen = len(p.wire)
			p.mu.Unlock()
		}
		for _, l := range lines {
			fmt.Fprintf(&out, "agent< %s\n", l)
		}
	}
	flush()
	for _, line := range strings.Split(agent, "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			continue
		case line == "!end":
			out.WriteString("agent> !end\n")
			b.agent.send(control.EndOfInput)
		default:
			fmt.Fprintf(&out, "agent> %s\n", line)
			b.agent.send(line)
		}
		flush()
	}
	return out.String()
}

// txtar is a txtar archive (golang.org/x/tools/txtar's format: a comment,
// then files, each introduced by a line "-- name --").
type txtar struct {
	comment []byte
	names   []string
	data    map[string]string
}

func parseTxtar(b []byte) *txtar {
	a := &txtar{data: map[string]string{}}
	name := ""
	var cur *strings.Builder
	end := func() {
		if cur != nil {
			a.data[name] = cur.String()
		}
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		s := string(line)
		if n, ok := strings.CutPrefix(strings.TrimRight(s, "\n"), "-- "); ok && strings.HasSuffix(n, " --") {
			end()
			name = strings.TrimSuffix(n, " --")
			a.names = append(a.names, name)
			cur = &strings.Builder{}
			continue
		}
		if cur == nil {
			a.comment = append(a.comment, line...)
			continue
		}
		cur.WriteString(s)
	}
	end()
	return a
}

func (a *txtar) file(name string) (string, bool) {
	s, ok := a.data[name]
	return s, ok
}

func (a *txtar) set(name, data string) {
	if _, ok := a.data[name]; !ok {
		a.names = append(a.names, name)
	}
	a.data[name] = data
}

func (a *txtar) format() []byte {
	var b bytes.Buffer
	b.Write(a.comment)
	for _, n := range a.names {
		fmt.Fprintf(&b, "-- %s --\n", n)
		b.WriteString(a.data[n])
		if d := a.data[n]; d != "" && !strings.HasSuffix(d, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
