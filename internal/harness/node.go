package harness

import (
	"fmt"
	"os/exec"
)

// lookNode finds the node executable on PATH.
func lookNode() (string, error) {
	p, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("node (Node.js) is not on PATH: %w", err)
	}
	return p, nil
}

// Node returns the absolute path of the node executable on PATH.
func Node() (string, error) { return lookNode() }
