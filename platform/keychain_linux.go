//go:build linux

package platform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/portcullis/portcullis/core/secrets"
)

// Names of the freedesktop.org Secret Service API, version 0.2
// (https://specifications.freedesktop.org/secret-service-spec/0.2/).
const (
	ssBusName       = "org.freedesktop.secrets"
	ssPath          = dbus.ObjectPath("/org/freedesktop/secrets")
	ssService       = "org.freedesktop.Secret.Service"
	ssCollection    = "org.freedesktop.Secret.Collection"
	ssItem          = "org.freedesktop.Secret.Item"
	ssSession       = "org.freedesktop.Secret.Session"
	ssPrompt        = "org.freedesktop.Secret.Prompt"
	ssLoginPath     = dbus.ObjectPath("/org/freedesktop/secrets/collection/login")
	ssNoObject      = dbus.ObjectPath("/")
	dbusProperties  = "org.freedesktop.DBus.Properties"
	ssErrIsLocked   = "org.freedesktop.Secret.Error.IsLocked"
	ssErrNoSuchObj  = "org.freedesktop.Secret.Error.NoSuchObject"
	ssStoreName     = "Secret Service"
	ssSchema        = "dev.portcullis.Credential"
	ssDefaultWait   = 10 * time.Second
	ssUnlockAdvice  = "unlock the default keyring (GNOME: Passwords and Keys / Seahorse; KDE: KWallet Manager; KeePassXC: unlock the database), then try again"
	ssMissingAdvice = "run a Secret Service in your desktop session (gnome-keyring, KWallet with its Secret Service API, or KeePassXC with Secret Service integration)"
)

// secretService is the Linux [secrets.Store]: generic secrets in the default
// collection of the freedesktop.org Secret Service on the D-Bus session bus,
// with the attributes service=dev.portcullis.app and account=SCOPE (label
// "Portcullis: SCOPE").
//
// It never shows a prompt. A locked collection or item gives
// [secrets.ErrLocked]; an operation for which the service asks to prompt is
// dismissed and gives [secrets.ErrLocked] too. Portcullis reads secrets from a
// background daemon, at moments nobody chose (a server's relaunch), and an
// unlock dialog popping up then would be a surprise the person cannot tie to
// a cause, and the call would hang until it is answered; the error's hint says
// how to unlock instead.
//
// Each operation opens its own connection to the session bus and closes it at
// the end, so a restarted bus or keyring daemon needs no recovery. The secret
// travels with the "plain" session algorithm: the session bus is private to
// the user, and any process of that user may ask the service for it anyway.
type secretService struct {
	// service is the value of the "service" attribute.
	service string
	// getenv reads the environment (os.Getenv; tests replace it).
	getenv func(string) string
	// timeout bounds one whole operation, connection included.
	timeout time.Duration
}

// NewSecretStore returns the credential store of this system: on Linux the
// Secret Service (gnome-keyring, KWallet, KeePassXC…) on the D-Bus session bus
// named by DBUS_SESSION_BUS_ADDRESS, or $XDG_RUNTIME_DIR/bus when that is
// unset. Without either it gives [secrets.ErrUnavailable]; it never starts a
// bus itself.
func NewSecretStore() secrets.Store {
	return &secretService{service: secrets.Service, getenv: os.Getenv, timeout: ssDefaultWait}
}

// busAddress returns the session bus address, or "" if there is none.
func (s *secretService) busAddress() string {
	if a := s.getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" && a != "autolaunch:" {
		return a
	}
	if dir := s.getenv("XDG_RUNTIME_DIR"); dir != "" {
		p := filepath.Join(dir, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode().Type() == os.ModeSocket {
			return "unix:path=" + dbus.EscapeBusAddressValue(p)
		}
	}
	return ""
}

// ssConn is one operation's connection to the Secret Service.
type ssConn struct {
	s    *secretService
	ctx  context.Context
	conn *dbus.Conn
	op   string
	sc   string
}

// fail builds the operation's error; kind may be nil.
func (c *ssConn) fail(kind error, detail string, cause error) error {
	e := &secrets.Error{Store: ssStoreName, Op: c.op, Scope: c.sc, Kind: kind, Detail: detail, Err: cause}
	switch kind {
	case secrets.ErrLocked:
		e.Hint = ssUnlockAdvice
	case secrets.ErrUnavailable:
		e.Hint = ssMissingAdvice
	}
	return e
}

// open validates the arguments and connects to the session bus.
func (s *secretService) open(op, scope string, secret []byte) (*ssConn, context.CancelFunc, error) {
	if err := secrets.Precheck(ssStoreName, op, scope, secret); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	c := &ssConn{s: s, ctx: ctx, op: op, sc: scope}
	addr := s.busAddress()
	if addr == "" {
		cancel()
		return nil, nil, c.fail(secrets.ErrUnavailable, "no D-Bus session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist", nil)
	}
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, nil, c.fail(secrets.ErrUnavailable, "connecting to the D-Bus session bus", err)
	}
	c.conn = conn
	return c, func() { conn.Close(); cancel() }, nil
}

// call invokes method on the object at path of the Secret Service and stores
// the reply in out.
func (c *ssConn) call(path dbus.ObjectPath, method string, out []any, args ...any) error {
	call := c.conn.Object(ssBusName, path).CallWithContext(c.ctx, method, 0, args...)
	if call.Err != nil {
		return call.Err
	}
	return call.Store(out...)
}

// classify turns a D-Bus failure into the operation's error.
func (c *ssConn) classify(what string, err error) error {
	if c.ctx.Err() != nil {
		return c.fail(secrets.ErrUnavailable, fmt.Sprintf("%s: the Secret Service did not answer within %v", what, c.s.timeout), nil)
	}
	if errors.Is(err, dbus.ErrClosed) {
		return c.fail(secrets.ErrUnavailable, what+": the D-Bus connection closed", err)
	}
	var de dbus.Error
	if !errors.As(err, &de) {
		return c.fail(nil, what, err)
	}
	cause := fmt.Errorf("%s: %w", de.Name, err)
	switch {
	case de.Name == ssErrIsLocked:
		return c.fail(secrets.ErrLocked, what, cause)
	case de.Name == ssErrNoSuchObj:
		return c.fail(secrets.ErrNotFound, what, cause)
	case de.Name == "org.freedesktop.DBus.Error.ServiceUnknown",
		de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner",
		de.Name == "org.freedesktop.DBus.Error.NoReply",
		de.Name == "org.freedesktop.DBus.Error.Timeout",
		de.Name == "org.freedesktop.DBus.Error.TimedOut",
		de.Name == "org.freedesktop.DBus.Error.Disconnected",
		strings.HasPrefix(de.Name, "org.freedesktop.DBus.Error.Spawn."):
		return c.fail(secrets.ErrUnavailable, what+": no Secret Service ("+ssBusName+") answers on the session bus", cause)
	}
	return c.fail(nil, what, cause)
}

// collection returns the default collection (the "default" alias, else the
// "login" collection), or ssNoObject when there is none.
func (c *ssConn) collection() (dbus.ObjectPath, error) {
	var path dbus.ObjectPath
	if err := c.call(ssPath, ssService+".ReadAlias", []any{&path}, "default"); err != nil {
		return "", c.classify("reading the default collection", err)
	}
	if path != ssNoObject && path != "" {
		return path, nil
	}
	var v dbus.Variant
	if err := c.call(ssPath, dbusProperties+".Get", []any{&v}, ssService, "Collections"); err != nil {
		return "", c.classify("listing collections", err)
	}
	paths, _ := v.Value().([]dbus.ObjectPath)
	for _, p := range paths {
		if p == ssLoginPath {
			return p, nil
		}
	}
	return ssNoObject, nil
}

// locked reads the Locked property of a collection or item.
func (c *ssConn) locked(path dbus.ObjectPath, iface string) (bool, error) {
	var v dbus.Variant
	if err := c.call(path, dbusProperties+".Get", []any{&v}, iface, "Locked"); err != nil {
		return false, c.classify("reading whether "+string(path)+" is locked", err)
	}
	b, ok := v.Value().(bool)
	if !ok {
		return false, c.fail(nil, fmt.Sprintf("the Locked property of %s is a %s, not a boolean", path, v.Signature()), nil)
	}
	return b, nil
}

// unlockedCollection returns the default collection after checking that it
// exists and is unlocked.
func (c *ssConn) unlockedCollection() (dbus.ObjectPath, error) {
	coll, err := c.collection()
	if err != nil {
		return "", err
	}
	if coll == ssNoObject {
		return "", nil
	}
	locked, err := c.locked(coll, ssCollection)
	if err != nil {
		return "", err
	}
	if locked {
		return "", c.fail(secrets.ErrLocked, fmt.Sprintf("the collection %s is locked", coll), nil)
	}
	return coll, nil
}

// attributes are the lookup attributes of scope's item.
func (s *secretService) attributes(scope string) map[string]string {
	return map[string]string{"service": s.service, "account": scope}
}

// search returns the items of scope in coll.
func (c *ssConn) search(coll dbus.ObjectPath) ([]dbus.ObjectPath, error) {
	var items []dbus.ObjectPath
	if err := c.call(coll, ssCollection+".SearchItems", []any{&items}, c.s.attributes(c.sc)); err != nil {
		return nil, c.classify("searching the collection", err)
	}
	return items, nil
}

// refusePrompt dismisses a prompt the service asked for and returns the error
// saying so; see [secretService].
func (c *ssConn) refusePrompt(prompt dbus.ObjectPath, what string) error {
	_ = c.call(prompt, ssPrompt+".Dismiss", nil)
	return c.fail(secrets.ErrLocked, what+": the Secret Service wants to show a prompt, which Portcullis does not open", nil)
}

// ssSecret is the Secret struct of the Secret Service API, (oayays).
type ssSecret struct {
	Session     dbus.ObjectPath
	Parameters  []byte
	Value       []byte
	ContentType string
}

// openSession opens a "plain" transfer session.
func (c *ssConn) openSession() (dbus.ObjectPath, error) {
	var out dbus.Variant
	var session dbus.ObjectPath
	if err := c.call(ssPath, ssService+".OpenSession", []any{&out, &session}, "plain", dbus.MakeVariant("")); err != nil {
		return "", c.classify("opening a session", err)
	}
	return session, nil
}

// Get returns the secret of scope from the default collection; see
// [secrets.Store.Get].
func (s *secretService) Get(scope string) ([]byte, error) {
	c, done, err := s.open("get", scope, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	coll, err := c.unlockedCollection()
	if err != nil {
		return nil, err
	}
	if coll == "" {
		return nil, c.fail(secrets.ErrNotFound, "the Secret Service has no default collection", nil)
	}
	items, err := c.search(coll)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, c.fail(secrets.ErrNotFound, "", nil)
	}
	item := items[0]
	if locked, err := c.locked(item, ssItem); err != nil {
		return nil, err
	} else if locked {
		return nil, c.fail(secrets.ErrLocked, fmt.Sprintf("the item %s is locked", item), nil)
	}
	session, err := c.openSession()
	if err != nil {
		return nil, err
	}
	defer c.call(session, ssSession+".Close", nil)
	var sec ssSecret
	if err := c.call(item, ssItem+".GetSecret", []any{&sec}, session); err != nil {
		return nil, c.classify("reading the secret", err)
	}
	if err := secrets.CheckStored(ssStoreName, scope, sec.Value); err != nil {
		return nil, err
	}
	return sec.Value, nil
}

// Set stores secret for scope in the default collection, replacing the item
// with the same attributes; see [secrets.Store.Set].
func (s *secretService) Set(scope string, secret []byte) error {
	c, done, err := s.open("set", scope, secret)
	if err != nil {
		return err
	}
	defer done()
	coll, err := c.unlockedCollection()
	if err != nil {
		return err
	}
	if coll == "" {
		return c.fail(secrets.ErrUnavailable, "the Secret Service has no default collection", nil)
	}
	session, err := c.openSession()
	if err != nil {
		return err
	}
	defer c.call(session, ssSession+".Close", nil)
	contentType := "text/plain; charset=utf8"
	if !utf8.Valid(secret) {
		contentType = "application/octet-stream"
	}
	attrs := s.attributes(scope)
	attrs["xdg:schema"] = ssSchema
	props := map[string]dbus.Variant{
		ssItem + ".Label":      dbus.MakeVariant(secrets.Label(scope)),
		ssItem + ".Attributes": dbus.MakeVariant(attrs),
	}
	sec := ssSecret{Session: session, Parameters: []byte{}, Value: secret, ContentType: contentType}
	var item, prompt dbus.ObjectPath
	if err := c.call(coll, ssCollection+".CreateItem", []any{&item, &prompt}, props, sec, true); err != nil {
		return c.classify("creating the item", err)
	}
	if prompt != ssNoObject {
		return c.refusePrompt(prompt, "creating the item")
	}
	return nil
}

// Exists searches the default collection for scope's item without reading
// its secret and without unlocking anything; see [secrets.Store.Exists]. A
// locked collection that finds nothing gives ErrLocked: a Secret Service
// need not search what it cannot decrypt.
func (s *secretService) Exists(scope string) error {
	c, done, err := s.open("look up", scope, nil)
	if err != nil {
		return err
	}
	defer done()
	coll, err := c.collection()
	if err != nil {
		return err
	}
	if coll == ssNoObject {
		return c.fail(secrets.ErrNotFound, "the Secret Service has no default collection", nil)
	}
	items, err := c.search(coll)
	if err != nil {
		return err
	}
	if len(items) > 0 {
		return nil
	}
	if locked, err := c.locked(coll, ssCollection); err != nil {
		return err
	} else if locked {
		return c.fail(secrets.ErrLocked, fmt.Sprintf("the collection %s is locked", coll), nil)
	}
	return c.fail(secrets.ErrNotFound, "", nil)
}

// Delete removes every item of scope from the default collection; see
// [secrets.Store.Delete].
func (s *secretService) Delete(scope string) error {
	c, done, err := s.open("delete", scope, nil)
	if err != nil {
		return err
	}
	defer done()
	coll, err := c.unlockedCollection()
	if err != nil {
		return err
	}
	if coll == "" {
		return c.fail(secrets.ErrNotFound, "the Secret Service has no default collection", nil)
	}
	items, err := c.search(coll)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return c.fail(secrets.ErrNotFound, "", nil)
	}
	for _, item := range items {
		var prompt dbus.ObjectPath
		if err := c.call(item, ssItem+".Delete", []any{&prompt}); err != nil {
			return c.classify("deleting the item", err)
		}
		if prompt != ssNoObject {
			return c.refusePrompt(prompt, "deleting the item")
		}
	}
	return nil
}
