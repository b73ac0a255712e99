package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	filePrefix = "audit-"
	fileSuffix = ".jsonl"
	headName   = "head.json"
	lockName   = "audit.lock"
)

// fileName returns the name of log file number n (audit-000001.jsonl).
func fileName(n int) string {
	return fmt.Sprintf("%s%06d%s", filePrefix, n, fileSuffix)
}

type logFile struct {
	num  int
	name string // base name
	path string
}

// listFiles returns the log files of dir in order of their numbers.
func listFiles(dir string) ([]logFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []logFile
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, filePrefix) || !strings.HasSuffix(name, fileSuffix) {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, filePrefix), fileSuffix))
		if err != nil || n <= 0 {
			continue
		}
		out = append(out, logFile{num: n, name: name, path: filepath.Join(dir, name)})
	}
	slices.SortFunc(out, func(a, b logFile) int { return a.num - b.num })
	return out, nil
}

// head is the content of head.json: the last committed event.
type head struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	Sig  string `json:"sig,omitempty"`
}

// readHead reads head.json; ok is false when it does not exist or cannot be
// parsed (a crash may leave it empty, since it is not fsynced).
func readHead(dir string) (h head, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, headName))
	if errors.Is(err, os.ErrNotExist) {
		return h, false, nil
	}
	if err != nil {
		return h, false, err
	}
	if json.Unmarshal(b, &h) != nil || h.Seq == 0 || !isHexText(h.Hash, hashPrefix) {
		return head{}, false, nil
	}
	return h, true, nil
}

// lineReader yields the lines of a file with their byte offsets.
type lineReader struct {
	r    io.Reader
	buf  []byte
	s, e int   // unread bytes are buf[s:e]
	off  int64 // file offset of buf[s]
	eof  bool
}

func newLineReader(r io.Reader, off int64) *lineReader {
	return &lineReader{r: r, buf: make([]byte, 1<<20), off: off}
}

// next returns the next line without its newline, the offset of its first
// byte, and whether it was terminated by a newline (only the last line of a
// file can be unterminated). It returns io.EOF after the last line. The
// returned slice is valid until the next call.
func (lr *lineReader) next() (b []byte, off int64, term bool, err error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(lr.buf[lr.s+scanned:lr.e], '\n'); i >= 0 {
			end := lr.s + scanned + i
			b, off = lr.buf[lr.s:end], lr.off
			lr.off += int64(end + 1 - lr.s)
			lr.s = end + 1
			return b, off, true, nil
		}
		scanned = lr.e - lr.s
		if lr.eof {
			if lr.s == lr.e {
				return nil, lr.off, false, io.EOF
			}
			b, off = lr.buf[lr.s:lr.e], lr.off
			lr.off += int64(lr.e - lr.s)
			lr.s = lr.e
			return b, off, false, nil
		}
		// Make room: move the partial line to the front, grow if full.
		if lr.s > 0 {
			n := copy(lr.buf, lr.buf[lr.s:lr.e])
			lr.s, lr.e = 0, n
		}
		if lr.e == len(lr.buf) {
			lr.buf = slices.Grow(lr.buf, len(lr.buf))[:2*len(lr.buf)]
		}
		n, err := lr.r.Read(lr.buf[lr.e:])
		lr.e += n
		if err == io.EOF {
			lr.eof = true
		} else if err != nil {
			return nil, lr.off, false, err
		}
	}
}

// forEachEvent calls fn for every event of the log in dir, in file order,
// skipping lines that are not events (torn regions). It does not check
// hashes; Verify does.
func forEachEvent(dir string, fn func(Event) error) error {
	files, err := listFiles(dir)
	if err != nil {
		return fmt.Errorf("audit: reading %s: %w", dir, err)
	}
	for _, lf := range files {
		if err := forEachEventInFile(lf.path, 0, fn); err != nil {
			return err
		}
	}
	return nil
}

var errStop = errors.New("stop")

func forEachEventInFile(path string, off int64, fn func(Event) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	if off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	lr := newLineReader(f, off)
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
		ev, err := l.event()
		if err != nil {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}
