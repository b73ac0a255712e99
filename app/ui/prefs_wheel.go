package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"
)

// The mouse wheel over a field of a Preferences form scrolls the form. A
// Fyne Entry scrolls its text inside an inner scroller, which is the deepest
// fyne.Scrollable under the pointer and so takes every wheel event, even
// when it has nothing to scroll. formEntry therefore lays a transparent
// wheelCatcher over its own drawing (drawn last, so found first for the
// wheel; it is neither tappable nor hoverable, so clicks, drags and the
// pointer still reach the entry) that passes the event to the form's
// scroller (wheel, set by newFormScroll). A multi-line entry whose text is
// taller than its box keeps the wheel for itself; a single-line one always
// passes it on, and still clips and scrolls long text inside the box as the
// cursor moves.

// formScroll makes the form entries in s's content pass the wheel to s, and
// returns s.
func formScroll(s *container.Scroll) *container.Scroll {
	wheelTo(s, s.Content)
	return s
}

// wheelTo makes every formEntry in the container tree of o pass the wheel
// to s. It descends through containers, not into other widgets.
func wheelTo(s *container.Scroll, o fyne.CanvasObject) {
	switch o := o.(type) {
	case *formEntry:
		o.wheel = s
	case *fyne.Container:
		for _, c := range o.Objects {
			wheelTo(s, c)
		}
	}
}

// wheelCatcher is the transparent cover of a formEntry that takes the wheel.
type wheelCatcher struct {
	widget.BaseWidget
	entry *formEntry
}

func newWheelCatcher(e *formEntry) *wheelCatcher {
	c := &wheelCatcher{entry: e}
	c.ExtendBaseWidget(c)
	return c
}

func (c *wheelCatcher) CreateRenderer() fyne.WidgetRenderer {
	return widget.NewSimpleRenderer(&fyne.Container{})
}

// Scrolled gives ev to the entry's own scroller when the entry is multi-line
// and its text overflows the box, else to the form's scroller.
func (c *wheelCatcher) Scrolled(ev *fyne.ScrollEvent) {
	e := c.entry
	if inner := e.innerScroll(); inner != nil && (e.wheel == nil || e.MultiLine && overflows(inner)) {
		inner.Scrolled(ev)
		return
	}
	if e.wheel != nil {
		e.wheel.Scrolled(ev)
	}
}

// overflows reports whether s's content is taller than s.
func overflows(s *container.Scroll) bool {
	return s.Content != nil && s.Content.MinSize().Height > s.Size().Height
}

// innerScroll returns the Entry's own text scroller, nil when it has none.
func (e *formEntry) innerScroll() *container.Scroll {
	if e.drawn == nil {
		return nil
	}
	for _, o := range e.drawn.WidgetRenderer.Objects() {
		if s, ok := o.(*container.Scroll); ok && s.Visible() {
			return s
		}
	}
	return nil
}

// CreateRenderer draws the Entry with the wheel catcher on top.
func (e *formEntry) CreateRenderer() fyne.WidgetRenderer {
	e.drawn = &wheelRenderer{WidgetRenderer: e.Entry.CreateRenderer(), catcher: newWheelCatcher(e)}
	return e.drawn
}

// wheelRenderer is an Entry's renderer with the wheel catcher over it.
type wheelRenderer struct {
	fyne.WidgetRenderer
	catcher *wheelCatcher
}

func (r *wheelRenderer) Layout(size fyne.Size) {
	r.WidgetRenderer.Layout(size)
	r.catcher.Move(fyne.NewPos(0, 0))
	r.catcher.Resize(size)
}

func (r *wheelRenderer) Objects() []fyne.CanvasObject {
	objs := r.WidgetRenderer.Objects()
	return append(objs[:len(objs):len(objs)], r.catcher)
}
