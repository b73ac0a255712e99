package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvNPM names the environment variable that points at the installed npm MCP
// peers (testdata/npm/node_modules); the Makefile exports it.
const EnvNPM = "PORTCULLIS_TEST_NPM"

// Entry points of the npm MCP peers, relative to the node_modules directory
// (testdata/npm/README.md).
const (
	EverythingEntry   = "@modelcontextprotocol/server-everything/dist/index.js"
	FilesystemEntry   = "@modelcontextprotocol/server-filesystem/dist/index.js"
	InspectorEntry    = "@modelcontextprotocol/inspector-cli/build/index.js"
	SupergatewayEntry = "supergateway/dist/index.js"
)

// ErrNoNPM is returned by NPM when the npm peers are not installed.
var ErrNoNPM = errors.New("npm MCP peers are not installed (run `make test-deps`, or `npm ci` in testdata/npm)")

// NPM returns the absolute node_modules directory holding the npm MCP peers:
// $PORTCULLIS_TEST_NPM when set, else root/testdata/npm/node_modules. It
// returns an error wrapping ErrNoNPM, naming the directory, when an entry
// point is missing there, and when no `node` is on PATH.
func NPM(root string) (string, error) {
	dir := os.Getenv(EnvNPM)
	if dir == "" {
		dir = filepath.Join(root, "testdata", "npm", "node_modules")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for _, e := range []string{EverythingEntry, FilesystemEntry, InspectorEntry, SupergatewayEntry} {
		if _, err := os.Stat(filepath.Join(dir, e)); err != nil {
			return "", fmt.Errorf("%w: %s is missing in %s", ErrNoNPM, e, dir)
		}
	}
	if _, err := lookNode(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoNPM, err)
	}
	return dir, nil
}
