// Package core_test guards the direction of imports (docs/DESIGN.md, "Packages"): core is
// the platform-independent domain, so nothing under core may depend on Fyne,
// on cgo, or on the app and platform packages that depend on core.
package core_test

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCoreImportsFlowOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .CgoFiles}}cgo{{end}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/portcullis/portcullis/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, flag, _ := strings.Cut(line, " ")
		switch {
		case strings.HasPrefix(path, "fyne.io/"):
			t.Errorf("core depends on %s (UI belongs in app/)", path)
		case strings.HasPrefix(path, module+"app"), strings.HasPrefix(path, module+"platform"):
			t.Errorf("core depends on %s (imports flow app, platform → core)", path)
		case flag == "cgo" && path != "runtime/cgo" && !strings.HasPrefix(path, "net") && !strings.HasPrefix(path, "os/user"):
			t.Errorf("core depends on cgo package %s", path)
		}
	}
}

// TestShimKeepsToTheContract: the `connect` shim speaks to the daemon only
// through package control (the handshake, the end-of-input line, the drain
// timeout, the refusal shape), so it does not depend on the daemon's
// internals: a change to the gateway cannot silently change the shim.
func TestShimKeepsToTheContract(t *testing.T) {
	const module = "github.com/portcullis/portcullis/core/"
	forbidden := map[string][]string{
		"shim": {"gateway", "daemon", "audit", "authz", "catalog", "supervisor"},
	}
	for pkg, deny := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "./"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		if !deps[module+"control"] {
			t.Errorf("core/%s does not depend on core/control: is the list right?", pkg)
		}
		for _, d := range deny {
			if deps[module+d] {
				t.Errorf("core/%s depends on core/%s; it must keep to the contract in core/control", pkg, d)
			}
		}
	}
}
