//go:build linux

package benchmark

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownProcessGroup puts the emulator in a new process group, so stopping
// it reaches what it left in the group without touching ours.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killTree SIGKILLs the process groups that the emulator's descendants
// lead (the emulator starts the bootstrap in a group of its own), then
// the emulator's own group.
func killTree(pid int) {
	groups := descendantGroups(pid)
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, g := range groups {
		for alive(g) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// descendantGroups lists the process groups led by descendants of pid.
func descendantGroups(pid int) []int {
	entries, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil
	}
	type proc struct{ ppid, pgrp int }
	procs := map[int]proc{}
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 {
			continue
		}
		p, err1 := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		ppid, err2 := strconv.Atoi(f[1])
		pgrp, err3 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		procs[p] = proc{ppid: ppid, pgrp: pgrp}
	}
	var groups []int
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for p, info := range procs {
			if info.ppid == parent && !seen[p] {
				seen[p] = true
				queue = append(queue, p)
				if info.pgrp == p {
					groups = append(groups, p)
				}
			}
		}
	}
	return groups
}
