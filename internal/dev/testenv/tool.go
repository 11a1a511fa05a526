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

// Python returns a python3 that can import module: the one on PATH, else
// pyenv's. The system python3 often comes first on a PATH without the
// shims and lacks the machine image's packages, so the first python3
// found is not enough. None skips the test, or fails it under RequireVar.
func Python(t testing.TB, module string) string {
	t.Helper()
	candidates := []string{"python3"}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".pyenv", "shims", "python3"))
	}
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err == nil && exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	Skip(t, "no python3 on PATH or in $HOME/.pyenv/shims can import "+module)
	return ""
}
