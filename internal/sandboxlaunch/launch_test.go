package sandboxlaunch

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLauncherStaysSmall: the launcher's whole cost is the initialization
// of what it imports (docs/DESIGN.md, "Sandbox"), so cmd/portcullis-sandbox
// depends on nothing but the standard library, golang.org/x/sys and this
// package.
func TestLauncherStaysSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "../../cmd/portcullis-sandbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/portcullis/portcullis/internal/sandboxlaunch": true,
		"github.com/portcullis/portcullis/cmd/portcullis-sandbox": true,
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, std, _ := strings.Cut(line, " ")
		n++
		if std == "true" || allowed[path] || strings.HasPrefix(path, "golang.org/x/sys/") {
			continue
		}
		t.Errorf("the sandbox's launcher depends on %s", path)
	}
	if n < 3 {
		t.Fatalf("go list listed %d packages: %s", n, out)
	}
}
