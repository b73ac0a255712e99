package ui

import (
	"context"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/codediff"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
)

// CodeSource says what changed in the source tree of a pending request's
// server since the code the person last approved (*daemon.Daemon).
type CodeSource interface {
	CodeChanges(ctx context.Context, id ids.RequestID) (codediff.Report, error)
}

// codeCache holds the code report of each request shown (nil: asked, not
// answered yet). Its own lock: a driver may run the report's fyne.Do on
// the report's goroutine (Fyne's test driver does).
type codeCache struct {
	mu sync.Mutex
	m  map[ids.RequestID]*codediff.Report
}

func (c *codeCache) get(id ids.RequestID) (*codediff.Report, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[id]
	return r, ok
}

func (c *codeCache) ask(id ids.RequestID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[ids.RequestID]*codediff.Report{}
	}
	c.m[id] = nil
}

// answer sets id's report, if it is still asked for.
func (c *codeCache) answer(id ids.RequestID, r *codediff.Report) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok {
		return false
	}
	c.m[id] = r
	return true
}

// keep forgets the reports of requests not in pending.
func (c *codeCache) keep(pending func(id ids.RequestID) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.m {
		if !pending(id) {
			delete(c.m, id)
		}
	}
}

// codeShown bounds the changed files listed on the card; the diff dialog
// has them all.
const codeShown = 8

// codeObjects is the card's code section: the summary, the changed files
// with their added and removed lines, and a button that shows the diff.
// The report is asked for once per request, off the Fyne goroutine (a
// snapshot may still be being taken); the card is drawn again when it
// arrives, and the window sized to it again. All of it is the server's
// tree's text: escaped.
func (w *ApprovalWindow) codeObjects(id ids.RequestID) []fyne.CanvasObject {
	if w.code == nil || id == "" {
		return nil
	}
	rep, asked := w.codeReports.get(id)
	if !asked {
		w.codeReports.ask(id)
		async := w.codeAsync
		if async == nil {
			async = func(f func()) { go f() }
		}
		async(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			r, err := w.code.CodeChanges(ctx, id)
			if err != nil {
				return // decided meanwhile: the card is gone
			}
			fyne.Do(func() {
				if !w.codeReports.answer(id, &r) {
					return // the request left the queue meanwhile
				}
				if w.currentID() == id {
					w.body.Objects = w.cardObjects(cardModel(w.queue[w.cur].Card))
					w.body.Refresh()
					w.fit() // the card grew: its files and button in view when the screen has room
				}
			})
		})
	}
	objs := []fyne.CanvasObject{sectionHeading("Code")}
	if rep == nil {
		return append(objs, dimLabel("reading the server's source tree…"))
	}
	summary := widget.NewLabel(textsafe.Line(rep.Summary()))
	summary.Wrapping = fyne.TextWrapWord
	objs = append(objs, summary)
	if len(rep.Changes) == 0 {
		return objs
	}
	since := dimLabel("in " + textsafe.Line(rep.Root) + ", since the code you approved for epoch " + shortEpoch(rep.Since))
	since.Wrapping = fyne.TextWrapWord
	objs = append(objs, since)
	for i, c := range rep.Changes {
		if i == codeShown {
			objs = append(objs, dimLabel("and more: see the diff"))
			break
		}
		objs = append(objs, widget.NewLabelWithStyle(textsafe.Line(c.Stat()), fyne.TextAlignLeading, fyne.TextStyle{Monospace: true}))
	}
	objs = append(objs, widget.NewButtonWithIcon("Show the code diff", theme.DocumentIcon(), func() { w.showDiff(*rep) }))
	return objs
}

// showDiff opens the report's diff in a dialog over the card, monospaced
// and scrolled; closing it (its button or Escape) returns to the card.
func (w *ApprovalWindow) showDiff(rep codediff.Report) {
	var b strings.Builder
	for _, c := range rep.Changes {
		if c.Diff == "" {
			b.WriteString(c.Stat() + "\n\n")
			continue
		}
		b.WriteString(c.Diff)
		if !strings.HasSuffix(c.Diff, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	text := widget.NewLabelWithStyle(textsafe.Block(b.String()), fyne.TextAlignLeading, fyne.TextStyle{Monospace: true})
	scroll := container.NewScroll(text)
	size := w.win.Canvas().Size()
	scroll.SetMinSize(fyne.NewSize(size.Width*0.9, size.Height*0.7))
	d := dialog.NewCustom("Code changed in "+textsafe.Line(rep.Label), "Close", scroll, w.win)
	d.SetOnClosed(func() {
		if w.diff == d {
			w.diff = nil
		}
	})
	w.diff = d
	d.Show()
}
