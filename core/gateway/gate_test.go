package gateway

import "testing"

func TestGate(t *testing.T) {
	g := newGate()
	if open, opened := g.state(); !open || !isClosed(opened) || g.inLine() {
		t.Fatal("a new gate is not open")
	}
	g.close()
	open, opened := g.state()
	if open || isClosed(opened) || !g.inLine() {
		t.Fatal("a closed gate lets messages go")
	}
	prev, first := g.join()
	if prev != nil {
		t.Fatal("the first message in line waits for another")
	}
	prev, second := g.join()
	if prev != (<-chan struct{})(first) {
		t.Fatal("the second message does not wait for the first")
	}
	g.open()
	if !isClosed(opened) || !g.inLine() {
		t.Fatal("an open gate with messages being released: want opened closed, and newcomers in line")
	}
	close(first)
	if !g.releasing() {
		t.Fatal("not releasing while the second message has not gone")
	}
	close(second)
	if g.releasing() || g.inLine() {
		t.Fatal("still in line once every held message went its way")
	}
}
