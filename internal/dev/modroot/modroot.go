// Package modroot finds the module root, the one place the tooling looks
// for go.mod: tests run in their package's folder and commands anywhere
// in the checkout, and both find the module's files from there.
package modroot

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNoModule is Find's answer outside the module.
var ErrNoModule = errors.New("no go.mod above the working directory: run from inside the genjobs checkout")

// Find returns the nearest folder with a go.mod, from dir upwards ("":
// the working directory).
func Find(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoModule
		}
		dir = parent
	}
}
