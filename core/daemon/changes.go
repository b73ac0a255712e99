package daemon

// Changes delivers a signal after any agent run's visible state changes
// (state, epoch, catalog revision, build note) and after an agent run starts
// or ends. Signals coalesce: a subscriber that is busy gets one signal for
// many changes, then reads Status. cancel ends the subscription.
func (d *Daemon) Changes() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	if d.subs == nil {
		d.subs = map[chan struct{}]struct{}{}
	}
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		if _, ok := d.subs[ch]; ok {
			delete(d.subs, ch)
			close(ch)
		}
		d.mu.Unlock()
	}
}

// notify signals every Changes subscriber without blocking.
func (d *Daemon) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.subs {
		select {
		case ch <- struct{}{}:
		default: // a signal is already pending
		}
	}
}
