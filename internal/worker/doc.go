// Package worker is the write path every handler takes with one record:
// decode the message, load the operation it names, lease the message,
// let the handler decide, and commit what it decided (Commit): the one
// conditional write (Persister.Persist), a lost race met in one place, the
// follow-up the written record expects (Emitter.Emit), and the record's
// failure reported to the batch, retryable or permanent (Classify
// decides, here only). The handlers keep only their decisions.
package worker
