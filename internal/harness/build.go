package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModulePath is the import path of the main module, as go.mod declares it.
const ModulePath = "github.com/portcullis/portcullis"

// ErrNoRepo is returned by RepoRoot when no directory above the working
// directory holds the Portcullis go.mod.
var ErrNoRepo = errors.New("not inside the Portcullis repository")

// RepoRoot returns the absolute path of the repository root: the nearest
// directory at or above the working directory whose go.mod declares
// ModulePath. It returns an error wrapping ErrNoRepo when there is none.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+ModulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w (no go.mod of %s above the working directory)", ErrNoRepo, ModulePath)
		}
		dir = parent
	}
}

// BuildError is a failed `go build`, with the compiler's output.
type BuildError struct {
	Target string // what was built, e.g. "portcullis" or "testdata/servers/echo"
	Output string // combined output of go build
	Err    error
}

// Error returns "building TARGET: ERR" and the compiler's output.
func (e *BuildError) Error() string {
	return fmt.Sprintf("building %s: %v\n%s", e.Target, e.Err, strings.TrimSpace(e.Output))
}

// Unwrap returns the error of the go command.
func (e *BuildError) Unwrap() error { return e.Err }

// BuildPortcullis builds the headless command (`CGO_ENABLED=0 go build -tags
// ci`, no cgo, Fyne's test driver) from the repository at root into
// dir/portcullis (the front, which runs `connect` and execs the full
// program for every other command) and dir/portcullis-app (the full
// program), and returns the path of portcullis. A failure is a
// *BuildError.
func BuildPortcullis(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "portcullis")
	return out, goBuild(ctx, root, "portcullis", "build", "-tags", "ci", "-o", dir+string(filepath.Separator), ".", "./cmd/portcullis-app")
}

// BuildServer builds the Go test server testdata/servers/NAME (its own
// module) into dir/NAME, with -ldflags when ldflags is not empty (for
// example "-X main.schemaRevision=2"), and returns that path. A failure is a
// *BuildError.
func BuildServer(ctx context.Context, root, dir, name, ldflags string) (string, error) {
	out := filepath.Join(dir, name)
	args := []string{"-C", filepath.Join(root, "testdata", "servers"), "build", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	return out, goBuild(ctx, root, "testdata/servers/"+name, append(args, "./"+name)...)
}

func goBuild(ctx context.Context, root, target string, args ...string) error {
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return &BuildError{Target: target, Output: string(out), Err: err}
	}
	return nil
}

// goCommand is the go command that runs this program's builds: $GOROOT/bin/go
// when GOROOT is set (as `go test` and `go run` set it), else go from PATH.
func goCommand() string {
	if r := os.Getenv("GOROOT"); r != "" {
		if p := filepath.Join(r, "bin", "go"); isExecutable(p) {
			return p
		}
	}
	return "go"
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// FileSHA256 returns the SHA-256 (FIPS 180-4) of the file at path as
// "sha256:<64 lowercase hex>", the form Portcullis's execution records use.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
