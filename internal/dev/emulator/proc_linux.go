//go:build linux

package emulator

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownProcessGroup puts the emulator in a new process group, so stopping
// it signals the group and reaches anything it left in it, without
// touching the caller's own group.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killTree SIGKILLs the groups the emulator's descendants lead, then the
// emulator's own group. The emulator starts the bootstrap with Setpgid,
// so the bootstrap is not in the emulator's group; it is found through
// /proc and killed first, while the emulator still lives to reap it,
// rather than left to init.
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

// alive reports whether pid still exists and has not yet been reaped.
func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// descendantGroups lists the process groups led by descendants of pid.
// Only a group whose leader is a descendant is listed: a descendant in
// someone else's group must not take that group down with it.
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
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		p, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		var state byte
		var ppid, pgrp int
		if i < 0 || err != nil {
			continue
		}
		if _, err := fmt.Sscanf(s[i+1:], " %c %d %d", &state, &ppid, &pgrp); err != nil {
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
