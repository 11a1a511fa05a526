package benchmark

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data as bbolt's commits do on Linux.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
