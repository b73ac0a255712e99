//go:build !unix

package identity_test

import "errors"

func mkfifo(string) error { return errors.New("no FIFOs here") }
