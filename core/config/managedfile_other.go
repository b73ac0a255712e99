//go:build !unix

package config

import (
	"fmt"
	"io/fs"
	"os"
	"runtime"
)

func notRootOnly(fs.FileInfo) string {
	return fmt.Sprintf("cannot be checked for its owner on %s", runtime.GOOS)
}

func openNoFollow(path string) (*os.File, error) { return os.Open(path) }
