package bolt

import "go.etcd.io/bbolt"

// OpenTimeout lets the external tests open a Store with a short lock
// timeout, so the lock test does not wait LockTimeout.
var OpenTimeout = openTimeout

// Commits is how many write transactions b has begun.
func Commits(b *Store) int64 { return b.commits.Load() }

// Write runs fn as one of b's writes.
func (b *Store) Write(fn func(*bbolt.Tx) error) error { return b.write(fn) }
