//go:build linux && cgo && !ci

package platform

/*
#cgo pkg-config: x11 xi
#include <X11/Xlib.h>
#include <X11/Xatom.h>
#include <X11/extensions/XInput2.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pc_ioerror;

// pc_io_exit replaces Xlib's exit(1) when this connection breaks: the
// check stops, the app goes on (and then cannot tell: unknown).
static void pc_io_exit(Display *d, void *data) { pc_ioerror = 1; }

// pc_open connects to $DISPLAY, asks for XInput 2.2 raw button and key
// events on the root window and for device hierarchy changes, and makes
// an unmapped window whose property changes time-stamp a sync. It returns
// NULL with *why set when it cannot (no display, no XInput2).
static Display *pc_open(int *opcode, Window *marker, Atom *atom, const char **why) {
	Display *d = XOpenDisplay(NULL);
	if (!d) { *why = "cannot connect to the X server"; return NULL; }
	XSetIOErrorExitHandler(d, pc_io_exit, NULL);
	int ev, err;
	if (!XQueryExtension(d, "XInputExtension", opcode, &ev, &err)) {
		XCloseDisplay(d); *why = "the X server has no XInput extension"; return NULL;
	}
	int major = 2, minor = 2;
	if (XIQueryVersion(d, &major, &minor) != Success || major < 2) {
		XCloseDisplay(d); *why = "the X server has no XInput 2"; return NULL;
	}
	Window root = DefaultRootWindow(d);
	unsigned char bits[XIMaskLen(XI_LASTEVENT)];
	memset(bits, 0, sizeof bits);
	XISetMask(bits, XI_RawButtonPress);
	XISetMask(bits, XI_RawButtonRelease);
	XISetMask(bits, XI_RawKeyPress);
	XISetMask(bits, XI_HierarchyChanged);
	XIEventMask mask = { XIAllDevices, sizeof bits, bits };
	XISelectEvents(d, root, &mask, 1);
	XSetWindowAttributes attrs;
	attrs.event_mask = PropertyChangeMask;
	*marker = XCreateWindow(d, root, -10, -10, 1, 1, 0, 0, InputOnly, CopyFromParent, CWEventMask, &attrs);
	*atom = XInternAtom(d, "_PORTCULLIS_INPUT_SYNC", False);
	XSync(d, False);
	if (pc_ioerror) { *why = "the connection to the X server broke"; return NULL; }
	return d;
}

// pc_sync asks for a PropertyNotify on the marker window: it comes after
// every event the server generated before it, with the server's time.
static void pc_sync(Display *d, Window marker, Atom atom) {
	XChangeProperty(d, marker, atom, XA_CARDINAL, 32, PropModeAppend, NULL, 0);
	XFlush(d);
}

// pc_under returns the deepest window under the pointer (0 when it
// cannot be read, or the pointer is on the root window itself).
static Window pc_under(Display *d) {
	Window root = DefaultRootWindow(d), w = root, r, child;
	int rx, ry, wx, wy;
	unsigned int mask;
	for (int depth = 0; depth < 64; depth++) {
		if (!XQueryPointer(d, w, &r, &child, &rx, &ry, &wx, &wy, &mask)) return 0;
		if (child == None) return w == root ? 0 : w;
		w = child;
	}
	return 0;
}

// pc_within reports whether w is a or one of its descendants.
static int pc_within(Display *d, Window w, Window a) {
	Window root = DefaultRootWindow(d);
	for (int depth = 0; w != 0 && depth < 64; depth++) {
		if (w == a) return 1;
		if (w == root) return 0;
		Window r, parent, *kids = NULL;
		unsigned int n;
		if (!XQueryTree(d, w, &r, &parent, &kids, &n)) return 0;
		if (kids) XFree(kids);
		w = parent;
	}
	return 0;
}

// pc_target returns the window a raw event of kind went to, as the X
// server delivers it: a button's to the deepest window under the pointer;
// a key's to the focus window, or to the window under the pointer when
// that lies inside the focus window (or the focus follows the pointer).
// 0 when it cannot be read.
static Window pc_target(Display *d, int kind) {
	Window under = pc_under(d);
	if (kind != XI_RawKeyPress) return under;
	Window focus;
	int revert;
	XGetInputFocus(d, &focus, &revert);
	if (focus == PointerRoot) return under;
	if (focus == None) return 0;
	return pc_within(d, under, focus) ? under : focus;
}

enum { PC_NONE, PC_RAW, PC_MARK, PC_HIERARCHY, PC_WAKE, PC_BROKEN };

// pc_next waits for the next event of interest or a byte on wakefd.
static int pc_next(Display *d, int wakefd, int opcode, Window marker, Atom atom, int *kind, int *dev, unsigned long *tm, Window *target) {
	for (;;) {
		if (pc_ioerror) return PC_BROKEN;
		while (XPending(d) > 0) {
			XEvent ev;
			XNextEvent(d, &ev);
			if (pc_ioerror) return PC_BROKEN;
			if (ev.type == PropertyNotify && ev.xproperty.window == marker && ev.xproperty.atom == atom) {
				*tm = ev.xproperty.time;
				return PC_MARK;
			}
			if (ev.type != GenericEvent || ev.xcookie.extension != opcode || !XGetEventData(d, &ev.xcookie)) continue;
			int r = PC_NONE;
			switch (ev.xcookie.evtype) {
			case XI_RawButtonPress:
			case XI_RawButtonRelease:
			case XI_RawKeyPress: {
				XIRawEvent *re = ev.xcookie.data;
				*kind = ev.xcookie.evtype;
				*dev = re->sourceid ? re->sourceid : re->deviceid;
				*tm = re->time;
				r = PC_RAW;
				break;
			}
			case XI_HierarchyChanged:
				r = PC_HIERARCHY;
				break;
			}
			XFreeEventData(d, &ev.xcookie);
			if (r == PC_RAW) *target = pc_target(d, *kind);
			if (r != PC_NONE) return r;
		}
		if (pc_ioerror) return PC_BROKEN;
		struct pollfd p[2] = {{ConnectionNumber(d), POLLIN, 0}, {wakefd, POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR) continue;
			return PC_BROKEN;
		}
		if (p[1].revents & POLLIN) {
			char b[64];
			if (read(wakefd, b, sizeof b) < 0) {}
			return PC_WAKE;
		}
		if ((p[0].revents & (POLLHUP | POLLERR)) && !(p[0].revents & POLLIN)) return PC_BROKEN;
	}
}

// pc_device_name returns the name of device id (a copy to free), or NULL.
static char *pc_device_name(Display *d, int id) {
	int n = 0;
	XIDeviceInfo *all = XIQueryDevice(d, XIAllDevices, &n);
	char *name = NULL;
	for (int i = 0; i < n; i++) {
		if (all[i].deviceid == id && all[i].name) { name = strdup(all[i].name); break; }
	}
	if (all) XIFreeDeviceInfo(all);
	return name;
}
*/
import "C"

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/portcullis/portcullis/core/daemon"
)

// x11Input is the InputCheck of an X11 session: a connection of its own
// to the X server, on a thread of its own, that receives the XInput2 raw
// events of every device (each names its source slave device) and, to
// judge a decision, syncs with the server (a property change on its own
// window, whose notification follows every event before it and carries
// the server's time) and applies JudgePresses.
type x11Input struct {
	reqs    chan judgeReq
	wake    *os.File // a byte here wakes the thread
	wakeR   *os.File
	done    chan struct{}
	once    sync.Once
	closing atomic.Bool
}

// judgeReq is one Judge question: the window, and where to answer.
type judgeReq struct {
	window uint64
	by     string
	answer chan daemon.WindowInput
}

// maxRawEvents bounds the raw events kept (the newest).
const maxRawEvents = 64

// NewInputCheck returns the InputCheck of this session. In an X11
// session with XInput 2 it tells device presses from XTEST and SendEvent
// input; in a Wayland session, without a display, or without XInput 2
// every answer is unknown (the window then needs the operating system's
// authentication to approve), with the reason.
func NewInputCheck() InputCheck {
	if os.Getenv("WAYLAND_DISPLAY") != "" || os.Getenv("XDG_SESSION_TYPE") == "wayland" {
		return unknownInput{reason: "a Wayland session: the window sees what Xwayland passes on, and other programs can send it input through the compositor"}
	}
	if os.Getenv("DISPLAY") == "" {
		return unknownInput{reason: "no X display"}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return unknownInput{reason: "no pipe for the input check: " + err.Error()}
	}
	x := &x11Input{reqs: make(chan judgeReq, 16), wake: w, wakeR: r, done: make(chan struct{})}
	opened := make(chan string, 1)
	go x.run(opened)
	if why := <-opened; why != "" {
		r.Close()
		w.Close()
		return unknownInput{reason: why}
	}
	return x
}

// judgeWait bounds how long Judge waits for the X server's answer.
const judgeWait = 2 * time.Second

// Judge tells where the press just before it came from. It hands the
// question to the thread that owns the X connection (woken through the
// pipe), which syncs with the server and applies JudgePresses; it answers
// unknown, with the reason, when that thread has too many questions queued,
// has stopped, or does not answer within judgeWait.
func (x *x11Input) Judge(window uint64, by string) daemon.WindowInput {
	ch := make(chan daemon.WindowInput, 1)
	select {
	case x.reqs <- judgeReq{window: window, by: by, answer: ch}:
	case <-x.done:
		return daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the connection to the X server broke"}
	default:
		return daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the input check is busy"}
	}
	if _, err := x.wake.Write([]byte{'j'}); err != nil {
		return daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the input check stopped"}
	}
	select {
	case v := <-ch:
		return v
	case <-time.After(judgeWait):
		return daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the X server did not answer the input check"}
	}
}

// Unknown: an X11 session with XInput 2 can tell.
func (x *x11Input) Unknown() daemon.WindowInput { return daemon.WindowInput{} }

// Close stops the event reader and waits for it, then closes its wake-up
// pipe.
func (x *x11Input) Close() error {
	x.once.Do(func() {
		x.closing.Store(true)
		x.wake.Write([]byte{'q'})
	})
	<-x.done
	return errors.Join(x.wake.Close(), x.wakeR.Close())
}

// run owns the X connection, on a locked thread, until Close or a broken
// connection.
func (x *x11Input) run(opened chan<- string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(x.done)
	var opcode C.int
	var marker C.Window
	var atom C.Atom
	var why *C.char
	C.XInitThreads()
	d := C.pc_open(&opcode, &marker, &atom, &why)
	if d == nil {
		opened <- C.GoString(why)
		return
	}
	defer C.XCloseDisplay(d)
	opened <- ""

	var (
		events  []RawPress
		serial  uint64
		used    uint64
		names   = map[int]string{}
		waiting []judgeReq
		syncing bool
	)
	wakefd := C.int(x.wakeR.Fd())
	for {
		// Take requests without blocking: they arrive with a wake byte.
		for {
			select {
			case q := <-x.reqs:
				waiting = append(waiting, q)
				continue
			default:
			}
			break
		}
		if len(waiting) > 0 && !syncing {
			C.pc_sync(d, marker, atom)
			syncing = true
		}
		var kind, dev C.int
		var tm C.ulong
		var target C.Window
		switch C.pc_next(d, wakefd, opcode, marker, atom, &kind, &dev, &tm, &target) {
		case C.PC_BROKEN:
			for _, q := range waiting {
				q.answer <- daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the connection to the X server broke"}
			}
			return
		case C.PC_WAKE:
			if x.closing.Load() {
				for _, q := range waiting {
					q.answer <- daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "the input check stopped"}
				}
				return
			}
		case C.PC_HIERARCHY:
			clear(names)
		case C.PC_RAW:
			id := int(dev)
			name, ok := names[id]
			if !ok {
				if c := C.pc_device_name(d, dev); c != nil {
					name = C.GoString(c)
					C.free(unsafe.Pointer(c))
				}
				names[id] = name
			}
			serial++
			events = append(events, RawPress{Serial: serial, Time: uint32(tm), Kind: rawKind(kind), Device: name, Target: uint64(target)})
			if len(events) > maxRawEvents {
				events = events[len(events)-maxRawEvents:]
			}
		case C.PC_MARK:
			if !syncing {
				continue
			}
			syncing = false
			for _, q := range waiting {
				var v daemon.WindowInput
				v, used = JudgePresses(events, uint32(tm), used, q.window, q.by)
				q.answer <- v
			}
			waiting = nil
		}
	}
}

func rawKind(k C.int) string {
	switch k {
	case C.XI_RawButtonPress:
		return "button press"
	case C.XI_RawButtonRelease:
		return "button release"
	}
	return "key press"
}
