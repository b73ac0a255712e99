// Package quietinit silences the standard logger while imported packages
// initialize. Fyne's translation setup logs "Error parsing user locale C"
// during package initialization whenever LANG is C or POSIX (the norm on
// servers and CI), which would print on every CLI command and in every
// agent's log through the shim. main restores the logger with Restore.
//
// It works because Go initializes packages in import-path order among those
// whose imports are ready, and this package, imported first by main and
// depending only on the standard library, is ready before Fyne's.
package quietinit

import (
	"io"
	"log"
	"os"
)

func init() { log.SetOutput(io.Discard) }

// Restore sends the standard logger to stderr again.
func Restore() { log.SetOutput(os.Stderr) }
