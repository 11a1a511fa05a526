//go:build !linux

package emulator

import (
	"os"
	"os/exec"
)

// ownProcessGroup does nothing here: the emulator and Lambda itself run
// on linux, where proc_linux.go manages process groups.
func ownProcessGroup(*exec.Cmd) {}

// killTree kills the emulator only.
func killTree(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
