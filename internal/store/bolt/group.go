package bolt

import (
	"errors"

	"go.etcd.io/bbolt"
)

// Group commit (package groupcommit). bbolt runs one write transaction at
// a time and, without NoSync, fsyncs every commit: one write per fsync caps a local run at
// the disk's fsync rate. So writes that arrive while a commit is under way
// queue up, and the next commit carries all of them in one transaction
// (one fsync), each write's function run in turn against what the ones
// before it wrote, as if they had run one at a time in that order. A
// write returns only after the transaction that holds it is durable.
//
// bbolt's own DB.Batch does the same but waits up to MaxBatchDelay for a
// batch to fill, and commits on a timer goroutine, outside guard. Here the
// first writer to find no commit under way commits at once, on its own
// goroutine and under guard (no added latency for a lone writer), and
// hands the next group to one of the writers that queued meanwhile.

// declined is a write function's error that it returned before changing
// anything (a failed condition: a revision conflict, an existing item): the
// group's transaction need not roll back for it, and the writer gets err.
type declined struct{ err error }

func (d declined) Error() string { return d.err.Error() }

// decline marks err as returned before the write function changed anything.
// Only a function that has not yet written may return it.
func decline(err error) error { return declined{err: err} }

// errNothingToCommit rolls back a group whose every write declined: there
// is nothing to make durable, so no fsync.
var errNothingToCommit = errors.New("every write in the group declined")

// write runs fn in a write transaction shared with the writes that queue
// alongside it, and returns fn's error once that transaction is committed
// and durable (or the commit's error). fn may run more than once, each
// time in a fresh transaction: whatever it reports must come from its
// last run (assign results, never accumulate them).
func (b *Store) write(fn func(*bbolt.Tx) error) error {
	return b.groups.Do(fn, b.commit)
}

// commit runs calls in one transaction and returns each one's result. A
// call that fails (or panics) after it may have written rolls the whole
// transaction back: it then runs alone, in a transaction of its own, and
// the others run again without it, so each gets the result it would have
// had by itself.
func (b *Store) commit(calls []func(*bbolt.Tx) error) []error {
	results := make([]error, len(calls))
	index := make([]int, len(calls)) // into results
	for i := range index {
		index[i] = i
	}
	for len(calls) > 0 {
		errs := make([]error, len(calls))
		failed := -1
		err := guard(b.db.Path(), func() error {
			return b.db.Update(func(tx *bbolt.Tx) error {
				changed := false
				for i, c := range calls {
					failed = i
					err := c(tx)
					if d, ok := err.(declined); ok {
						errs[i] = d.err
						continue
					}
					if err != nil {
						return err
					}
					changed = true
				}
				failed = -1
				if !changed {
					return errNothingToCommit
				}
				return nil
			})
		})
		b.commits.Add(1)
		if err == nil && !b.db.NoSync {
			b.syncs.Add(2)
		}
		if err != nil && failed >= 0 && len(calls) > 1 {
			results[index[failed]] = b.commit(calls[failed : failed+1])[0]
			calls = append(calls[:failed:failed], calls[failed+1:]...)
			index = append(index[:failed:failed], index[failed+1:]...)
			continue
		}
		for i := range calls {
			switch {
			case errors.Is(err, errNothingToCommit):
				results[index[i]] = errs[i]
			case err != nil:
				results[index[i]] = err
			default:
				results[index[i]] = errs[i]
			}
		}
		break
	}
	return results
}
