package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Tool returns the path of a command the machine's Python provides
// (cfn-lint, python3, ...): on PATH, else among pyenv's shims
// ($HOME/.pyenv/shims), where the machine image installs them and a
// non-login shell's PATH may not reach. A missing tool skips the test, or
// fails it under RequireVar: these cannot be installed from here, so a
// machine without them must say so, never pass.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if path, err := lookTool(name); err == nil {
		return path
	}
	Skip(t, name+" is neither on PATH nor in $HOME/.pyenv/shims")
	return ""
}

func lookTool(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	if home, herr := os.UserHomeDir(); herr == nil {
		if p, perr := exec.LookPath(filepath.Join(home, ".pyenv", "shims", name)); perr == nil {
			return p, nil
		}
	}
	return "", err
}
