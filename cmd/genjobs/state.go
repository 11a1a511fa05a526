package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/genjobs/genjobs/internal/operator"
)

// Local state layout: operator.DefaultStateRoot and its runs (runsDir)
// and latest link (operator.LatestLink). A run never reuses or deletes another run's directory: the demo's
// operation ids repeat, and a reused store would mix two runs' records,
// artifacts and audit trails.
const (
	runsDir  = "runs"
	lockFile = ".lock"
)

// newRunDir makes a new, empty run directory under root and returns it
// with its id (UTC time and a random suffix, so ids sort by start).
func newRunDir(root string, now time.Time) (dir, id string, err error) {
	if err := os.MkdirAll(filepath.Join(root, runsDir), 0o755); err != nil {
		return "", "", fmt.Errorf("state root %s: %w", root, err)
	}
	for range 5 {
		var b [3]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", "", err
		}
		id = now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
		dir = filepath.Join(root, runsDir, id)
		err = os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, id, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", "", fmt.Errorf("run directory: %w", err)
		}
	}
	return "", "", fmt.Errorf("run directory: %w", err)
}

// pointLatest makes root/latest name the run id, atomically (a new link
// renamed over the old one), so a reader never sees it missing.
func pointLatest(root, id string) error {
	tmp := filepath.Join(root, fmt.Sprintf(".%s.%d", operator.LatestLink, os.Getpid()))
	_ = os.Remove(tmp)
	err := os.Symlink(filepath.Join(runsDir, id), tmp)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(root, operator.LatestLink))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("point %s at run %s: %w", operator.LatestLink, id, err)
	}
	return nil
}

// errStateInUse is returned when another process holds a state
// directory's lock.
var errStateInUse = errors.New("in use by another genjobs run")

// lockState takes an exclusive, non-blocking lock on dir for this process
// (released by the returned func, or by the kernel when the process
// exits, so a crashed run never leaves it locked).
func lockState(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := strings.TrimSpace(string(holder))
			if who == "" {
				who = "unknown process"
			}
			return nil, fmt.Errorf("state directory %s is %w (%s); wait for it to finish or give another --state", dir, errStateInUse, who)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
