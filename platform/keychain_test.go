//go:build linux

package platform

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/secrets"
)

// The tests against a real Secret Service run only on a throwaway keyring:
// scripts/with-secret-service.sh starts one on a private session bus and sets
// PORTCULLIS_TEST_KEYRING_PASSWORD to the password it unlocked it with. They
// write items and lock the default collection, which they must never do to a
// person's own keyring.
const testPasswordVar = "PORTCULLIS_TEST_KEYRING_PASSWORD"

// testService is the "service" attribute of the items the tests write, so that
// they never touch Portcullis's own items.
const testService = "dev.portcullis.test"

// throwawayKeyring skips the test unless a throwaway Secret Service is
// available, and returns its password.
func throwawayKeyring(t *testing.T) string {
	t.Helper()
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" {
		t.Skip("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is unset): run these tests as `scripts/with-secret-service.sh go test ./platform/` to get a real, throwaway Secret Service")
	}
	pw := os.Getenv(testPasswordVar)
	if pw == "" {
		t.Skip(testPasswordVar + " is unset: these tests write to and lock the default keyring, so they run only on the throwaway one that scripts/with-secret-service.sh starts")
	}
	return pw
}

func testStore(getenv func(string) string) *secretService {
	return &secretService{service: testService, getenv: getenv, timeout: 5 * time.Second}
}

// noSecretIn fails the test if err's text contains secret.
func noSecretIn(t *testing.T, err error, secret []byte) {
	t.Helper()
	if err != nil && len(secret) > 0 && bytes.Contains([]byte(err.Error()), secret) {
		t.Errorf("error text contains the secret: %v", err)
	}
}

// wantKind checks that err matches kind, carries a *secrets.Error, and does not
// contain secret.
func wantKind(t *testing.T, what string, err, kind error, secret []byte) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s: error %v, want one matching %v", what, err, kind)
		return
	}
	var se *secrets.Error
	if !errors.As(err, &se) {
		t.Errorf("%s: error %T is not a *secrets.Error", what, err)
	}
	noSecretIn(t, err, secret)
}

// allOps runs Get, Set and Delete of scope and returns their errors by name.
func allOps(s secrets.Store, scope string, secret []byte) map[string]error {
	_, gerr := s.Get(scope)
	serr := s.Set(scope, secret)
	return map[string]error{"get": gerr, "set": serr, "exists": s.Exists(scope), "delete": s.Delete(scope)}
}

func TestSecretServiceNoBus(t *testing.T) {
	secret := []byte("s3cr3t-no-bus")
	emptyRuntime := t.TempDir()
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"no address, no runtime dir", nil},
		{"no address, runtime dir without a bus", map[string]string{"XDG_RUNTIME_DIR": emptyRuntime}},
		{"autolaunch is not followed", map[string]string{"DBUS_SESSION_BUS_ADDRESS": "autolaunch:"}},
		{"address of a missing socket", map[string]string{"DBUS_SESSION_BUS_ADDRESS": "unix:path=" + filepath.Join(emptyRuntime, "nobody-listens")}},
		{"malformed address", map[string]string{"DBUS_SESSION_BUS_ADDRESS": "nonsense"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testStore(func(k string) string { return tt.env[k] })
			for op, err := range allOps(s, "inventory-api", secret) {
				wantKind(t, op, err, secrets.ErrUnavailable, secret)
				if secrets.Hint(err) == "" {
					t.Errorf("%s: %v has no hint for a person", op, err)
				}
			}
		})
	}
}

func TestSecretServiceArguments(t *testing.T) {
	// Argument checks come before any bus is asked: no bus is needed.
	s := testStore(func(string) string { return "" })
	tests := []struct {
		name   string
		scope  string
		secret []byte
		want   error
	}{
		{"empty secret", "inventory-api", nil, secrets.ErrEmpty},
		{"whitespace secret", "inventory-api", []byte(" \n\t"), secrets.ErrEmpty},
		{"scope with a space", "inventory api", []byte("x"), secrets.ErrInvalidScope},
		{"empty scope", "", []byte("x"), secrets.ErrInvalidScope},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantKind(t, "set", s.Set(tt.scope, tt.secret), tt.want, []byte("never"))
		})
	}
}

// privateBus starts a dbus-daemon that can activate no service, and returns
// its address. It skips the test when dbus-daemon is not installed.
func privateBus(t *testing.T) string {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon is not installed")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	// A session bus configuration without <servicedir>: nothing is activated.
	err = os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	select {
	case addr := <-lines:
		if addr == "" {
			t.Fatal("dbus-daemon printed no address")
		}
		return addr
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon did not print its address within 10s")
	}
	return ""
}

func TestSecretServiceNotOnBus(t *testing.T) {
	addr := privateBus(t)
	secret := []byte("s3cr3t-no-service")
	s := testStore(func(k string) string {
		if k == "DBUS_SESSION_BUS_ADDRESS" {
			return addr
		}
		return ""
	})
	for op, err := range allOps(s, "inventory-api", secret) {
		wantKind(t, op, err, secrets.ErrUnavailable, secret)
		if !strings.Contains(err.Error(), "no Secret Service") {
			t.Errorf("%s: %v does not say that no Secret Service answers", op, err)
		}
	}
}

// silentService owns org.freedesktop.secrets and never answers.
type silentService struct{ release chan struct{} }

func (s silentService) ReadAlias(string) (dbus.ObjectPath, *dbus.Error) {
	<-s.release
	return "/", nil
}

func TestSecretServiceNoAnswer(t *testing.T) {
	addr := privateBus(t)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := silentService{release: make(chan struct{})}
	defer close(svc.release)
	if err := conn.Export(svc, ssPath, ssService); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName(ssBusName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("owning %s: reply %v, %v", ssBusName, reply, err)
	}
	s := testStore(func(k string) string {
		if k == "DBUS_SESSION_BUS_ADDRESS" {
			return addr
		}
		return ""
	})
	s.timeout = 200 * time.Millisecond
	_, err = s.Get("inventory-api")
	wantKind(t, "get", err, secrets.ErrUnavailable, nil)
	if !strings.Contains(fmt.Sprint(err), "did not answer within 200ms") {
		t.Errorf("get: %v does not say that the service did not answer", err)
	}
}

// ssObject reads a property of a Secret Service object on the session bus.
func ssProperty(t *testing.T, path dbus.ObjectPath, iface, name string) any {
	t.Helper()
	conn, err := dbus.ConnectSessionBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v, err := conn.Object(ssBusName, path).GetProperty(iface + "." + name)
	if err != nil {
		t.Fatalf("reading %s.%s of %s: %v", iface, name, path, err)
	}
	return v.Value()
}

// findItems returns the paths of the items of scope in the default collection.
func findItems(t *testing.T, s *secretService, scope string) []dbus.ObjectPath {
	t.Helper()
	c, done, err := s.open("get", scope, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	coll, err := c.collection()
	if err != nil {
		t.Fatal(err)
	}
	items, err := c.search(coll)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func TestSecretServiceRoundTrip(t *testing.T) {
	throwawayKeyring(t)
	s := testStore(os.Getenv)
	const scope = "round-trip"
	first, second := []byte("s3cr3t-first\nline two"), []byte("s3cr3t-second")

	_, err := s.Get(scope)
	wantKind(t, "get before set", err, secrets.ErrNotFound, first)
	wantKind(t, "exists before set", s.Exists(scope), secrets.ErrNotFound, first)
	wantKind(t, "delete before set", s.Delete(scope), secrets.ErrNotFound, first)

	if err := s.Set(scope, first); err != nil {
		t.Fatalf("set: %v", err)
	}
	got, err := s.Get(scope)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if diff := cmp.Diff(first, got); diff != "" {
		t.Errorf("get after set (-want +got):\n%s", diff)
	}

	// Set again updates the one item instead of adding a second.
	if err := s.Set(scope, second); err != nil {
		t.Fatalf("update: %v", err)
	}
	got, err = s.Get(scope)
	if err != nil {
		t.Fatalf("get after update: %v", err)
	}
	if diff := cmp.Diff(second, got); diff != "" {
		t.Errorf("get after update (-want +got):\n%s", diff)
	}
	items := findItems(t, s, scope)
	if len(items) != 1 {
		t.Fatalf("after two sets: %d items, want 1", len(items))
	}
	if label := ssProperty(t, items[0], ssItem, "Label"); label != "Portcullis: "+scope {
		t.Errorf("label %q, want %q", label, "Portcullis: "+scope)
	}
	wantAttrs := map[string]string{"service": testService, "account": scope, "xdg:schema": ssSchema}
	if diff := cmp.Diff(wantAttrs, ssProperty(t, items[0], ssItem, "Attributes")); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}

	// Another scope is another item.
	if err := s.Set(scope+"-other", first); err != nil {
		t.Fatalf("set other: %v", err)
	}
	if got, err := s.Get(scope); err != nil || !bytes.Equal(got, second) {
		t.Errorf("get after setting another scope: %q, %v", got, err)
	}

	if err := s.Exists(scope); err != nil {
		t.Errorf("exists after set: %v", err)
	}
	if err := s.Delete(scope); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wantKind(t, "exists after delete", s.Exists(scope), secrets.ErrNotFound, second)
	_, err = s.Get(scope)
	wantKind(t, "get after delete", err, secrets.ErrNotFound, second)
	wantKind(t, "delete after delete", s.Delete(scope), secrets.ErrNotFound, second)
	if err := s.Delete(scope + "-other"); err != nil {
		t.Fatalf("delete other: %v", err)
	}
}

func TestSecretServiceValues(t *testing.T) {
	throwawayKeyring(t)
	s := testStore(os.Getenv)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	tests := []struct {
		name  string
		value []byte
	}{
		{"token", []byte("ghp_0123456789")},
		{"not UTF-8", []byte{0xff, 0x00, 0xfe, 'x'}},
		{"trailing newline kept", []byte("value\n")},
		{"64 KiB", big},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope := fmt.Sprintf("value-%d", i)
			if err := s.Set(scope, tt.value); err != nil {
				t.Fatalf("set: %v", err)
			}
			defer s.Delete(scope)
			got, err := s.Get(scope)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if !bytes.Equal(got, tt.value) {
				t.Errorf("got %d bytes %.20q, want %d bytes %.20q", len(got), got, len(tt.value), tt.value)
			}
		})
	}
}

// TestSecretServiceOtherClients checks that the items are the ones other
// Secret Service clients see: secret-tool (libsecret) reads what Set wrote,
// and Get reads what secret-tool wrote, refusing an empty value.
func TestSecretServiceOtherClients(t *testing.T) {
	throwawayKeyring(t)
	tool, err := exec.LookPath("secret-tool")
	if err != nil {
		t.Skip("secret-tool (libsecret-tools) is not installed")
	}
	s := testStore(os.Getenv)
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(tool, args...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("secret-tool %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}

	if err := s.Set("by-portcullis", []byte("s3cr3t-ours")); err != nil {
		t.Fatal(err)
	}
	defer s.Delete("by-portcullis")
	if got := run("", "lookup", "service", testService, "account", "by-portcullis"); got != "s3cr3t-ours" {
		t.Errorf("secret-tool lookup: %q, want %q", got, "s3cr3t-ours")
	}

	run("s3cr3t-theirs", "store", "--label=by hand", "service", testService, "account", "by-hand")
	defer s.Delete("by-hand")
	if got, err := s.Get("by-hand"); err != nil || string(got) != "s3cr3t-theirs" {
		t.Errorf("get of an item secret-tool stored: %q, %v", got, err)
	}

	run("", "store", "--label=empty", "service", testService, "account", "empty")
	defer s.Delete("empty")
	_, err = s.Get("empty")
	wantKind(t, "get of an empty item", err, secrets.ErrEmpty, nil)
}

// setLocked locks or unlocks the default collection through the Secret Service
// API (Lock) or gnome-keyring's UnlockWithMasterPassword, which unlocks
// without a prompt.
func setLocked(t *testing.T, locked bool, password string) {
	t.Helper()
	conn, err := dbus.ConnectSessionBus()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := conn.Object(ssBusName, ssPath)
	var coll dbus.ObjectPath
	if err := svc.Call(ssService+".ReadAlias", 0, "default").Store(&coll); err != nil {
		t.Fatal(err)
	}
	if locked {
		var done []dbus.ObjectPath
		var prompt dbus.ObjectPath
		if err := svc.Call(ssService+".Lock", 0, []dbus.ObjectPath{coll}).Store(&done, &prompt); err != nil {
			t.Fatalf("locking %s: %v", coll, err)
		}
		if prompt != ssNoObject {
			t.Fatalf("locking %s asks for a prompt", coll)
		}
		return
	}
	var out dbus.Variant
	var session dbus.ObjectPath
	if err := svc.Call(ssService+".OpenSession", 0, "plain", dbus.MakeVariant("")).Store(&out, &session); err != nil {
		t.Fatal(err)
	}
	master := ssSecret{Session: session, Parameters: []byte{}, Value: []byte(password), ContentType: "text/plain"}
	if err := svc.Call("org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface.UnlockWithMasterPassword", 0, coll, master).Err; err != nil {
		t.Fatalf("unlocking %s: %v", coll, err)
	}
}

func TestSecretServiceLocked(t *testing.T) {
	password := throwawayKeyring(t)
	s := testStore(os.Getenv)
	secret := []byte("s3cr3t-locked")
	if err := s.Set("locked", secret); err != nil {
		t.Fatal(err)
	}
	defer s.Delete("locked")

	setLocked(t, true, password)
	unlocked := false
	defer func() {
		if !unlocked {
			setLocked(t, false, password)
		}
	}()
	// Exists reads no secret: gnome-keyring searches a locked collection
	// by hashed attributes, so a stored item is found while locked.
	if err := s.Exists("locked"); err != nil {
		t.Errorf("exists of a stored item while locked: %v, want nil", err)
	}
	for op, err := range allOps(s, "locked", secret) {
		if op == "exists" {
			continue // after the delete above failed, the same as just checked
		}
		wantKind(t, op, err, secrets.ErrLocked, secret)
		if !strings.Contains(secrets.Hint(err), "unlock") {
			t.Errorf("%s: hint %q does not say to unlock", op, secrets.Hint(err))
		}
	}
	// A scope with nothing stored is locked too, not missing: a locked
	// collection does not say what it holds.
	_, err := s.Get("never-stored")
	wantKind(t, "get of a scope never stored", err, secrets.ErrLocked, secret)
	wantKind(t, "exists of a scope never stored", s.Exists("never-stored"), secrets.ErrLocked, secret)

	setLocked(t, false, password)
	unlocked = true
	got, err := s.Get("locked")
	if err != nil || !bytes.Equal(got, secret) {
		t.Errorf("get after unlocking: %q, %v", got, err)
	}
}

// BenchmarkSecretServiceGet measures one Get against the real Secret Service,
// connection to the session bus included (each operation opens its own).
func BenchmarkSecretServiceGet(b *testing.B) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" || os.Getenv(testPasswordVar) == "" {
		b.Skip("needs the throwaway Secret Service of scripts/with-secret-service.sh")
	}
	s := testStore(os.Getenv)
	if err := s.Set("bench", []byte("s3cr3t-bench")); err != nil {
		b.Fatal(err)
	}
	defer s.Delete("bench")
	for b.Loop() {
		if _, err := s.Get("bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSecretServiceSet measures one Set (an update after the first).
func BenchmarkSecretServiceSet(b *testing.B) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" || os.Getenv(testPasswordVar) == "" {
		b.Skip("needs the throwaway Secret Service of scripts/with-secret-service.sh")
	}
	s := testStore(os.Getenv)
	defer s.Delete("bench-set")
	for b.Loop() {
		if err := s.Set("bench-set", []byte("s3cr3t-bench")); err != nil {
			b.Fatal(err)
		}
	}
}
