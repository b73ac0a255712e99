//go:build linux

package platform

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/loginitem"
)

func TestLoginItemLinux(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	item, err := NewLoginItem()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg, "autostart", "dev.portcullis.app.desktop")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wantEnabled := func(want bool) {
		t.Helper()
		got, err := item.Enabled()
		if err != nil || got != want {
			t.Fatalf("Enabled() = %v, %v; want %v, nil", got, err, want)
		}
	}

	wantEnabled(false)
	if err := item.Disable(); err != nil {
		t.Fatalf("Disable when not enabled: %v", err)
	}
	for range 2 { // idempotent
		if err := item.Enable(); err != nil {
			t.Fatal(err)
		}
		wantEnabled(true)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(loginitem.DesktopEntry(exe)), string(data)); diff != "" {
		t.Errorf("autostart entry (-want +got):\n%s", diff)
	}
	if !bytes.Contains(data, []byte("\nX-GNOME-Autostart-enabled=true\n")) {
		t.Errorf("entry lacks X-GNOME-Autostart-enabled=true:\n%s", data)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("entry mode = %v, %v; want 0644", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("autostart dir holds %d files, want 1 (no temporary file left)", len(ents))
	}

	// A desktop switching the entry off is reported as disabled, and Enable
	// switches it on again.
	off := bytes.Replace(data, []byte("X-GNOME-Autostart-enabled=true"), []byte("X-GNOME-Autostart-enabled=false"), 1)
	if err := os.WriteFile(path, off, 0o644); err != nil {
		t.Fatal(err)
	}
	wantEnabled(false)
	if err := item.Enable(); err != nil {
		t.Fatal(err)
	}
	wantEnabled(true)

	if err := item.Disable(); err != nil {
		t.Fatal(err)
	}
	wantEnabled(false)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("entry still there after Disable: %v", err)
	}
}

func TestLoginItemLinuxConfigHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"", "relative/dir"} { // both mean ~/.config
		t.Setenv("XDG_CONFIG_HOME", v)
		item, err := NewLoginItem()
		if err != nil {
			t.Fatal(err)
		}
		if err := item.Enable(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(home, ".config", "autostart", "dev.portcullis.app.desktop")
		if _, err := os.Stat(p); err != nil {
			t.Errorf("XDG_CONFIG_HOME=%q: %v", v, err)
		}
		if err := item.Disable(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoginItemLinuxUnreadable(t *testing.T) {
	cfg := t.TempDir()
	// A directory where the entry should be: neither readable as a file
	// nor replaceable, and both are reported.
	if err := os.MkdirAll(filepath.Join(cfg, "autostart", "dev.portcullis.app.desktop", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	item := newAutostartItem(cfg, "/usr/bin/portcullis")
	if _, err := item.Enabled(); err == nil {
		t.Error("Enabled() on a directory: want an error")
	}
	if err := item.Enable(); err == nil {
		t.Error("Enable() over a directory: want an error")
	}
}

// TestLoginItemLinuxLaunches hands the written entry to GLib's launcher (the
// code GNOME's session uses to run autostart entries) and checks that it
// starts the right executable, from a directory whose name needs quoting.
func TestLoginItemLinuxLaunches(t *testing.T) {
	gio, err := exec.LookPath("gio")
	if err != nil {
		t.Skip("gio (GLib) is not installed")
	}
	// GLib checks that the program exists before expanding %% in its
	// path, so this path avoids '%' (which ExecArg's tests cover).
	dir := filepath.Join(t.TempDir(), `My Apps`, `$HOME\x (1)`)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "portcullis")
	marker := filepath.Join(t.TempDir(), "launched")
	script := "#!/bin/sh\necho \"$0\" > \"$PORTCULLIS_TEST_MARKER\"\n"
	if err := os.WriteFile(exe, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir()
	item := newAutostartItem(cfg, exe)
	if err := item.Enable(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gio, "launch", item.path)
	cmd.Env = append(os.Environ(), "PORTCULLIS_TEST_MARKER="+marker)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gio launch: %v\n%s", err, out)
	}
	for {
		got, err := os.ReadFile(marker)
		if err == nil && bytes.HasSuffix(got, []byte("\n")) {
			if string(got) != exe+"\n" {
				t.Errorf("launched %q, want %q", got, exe)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the entry's program did not run within 20s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
