package identity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LookPath resolves a launch command as written in the configuration to an
// absolute path, without resolving symlinks. A command containing a slash is
// taken relative to dir (an absolute path as is); a bare name is searched in
// the PATH of env (a "K=V" list where the last PATH entry wins), skipping
// empty and relative PATH elements so that the current directory is never
// searched implicitly (as os/exec refuses with ErrDot). dir "" means the
// current directory. The result must be a regular file with an execute bit;
// otherwise the error wraps [ErrCommandNotFound] and names the command and
// the reason.
func LookPath(command, dir string, env []string) (string, error) {
	if command == "" {
		return "", fmt.Errorf("%w: empty command", ErrCommandNotFound)
	}
	if strings.ContainsRune(command, '/') {
		p := command
		if !filepath.IsAbs(p) {
			base, err := absDir(dir)
			if err != nil {
				return "", err
			}
			p = filepath.Join(base, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: %s: %v", ErrCommandNotFound, command, err)
		}
		return filepath.Clean(p), nil
	}
	path := lastEnv(env, "PATH")
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, command)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q is not in PATH", ErrCommandNotFound, command)
}

// checkExecutable reports why p is not an executable regular file, or nil.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// lastEnv returns the value of the last "key=" entry of env, or "".
func lastEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// absDir returns dir as an absolute path, the current directory for "".
func absDir(dir string) (string, error) {
	if dir == "" {
		d, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("working directory: %w", err)
		}
		return d, nil
	}
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("working directory %s: %w", dir, err)
	}
	return d, nil
}
