//go:build unix

package mutation

import (
	"os/exec"
	"syscall"
)

// killGroup makes cmd the leader of its own process group and has a
// cancelled cmd kill the whole group: go test's test binaries and DynamoDB
// Local's java go with it instead of outliving the run.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
