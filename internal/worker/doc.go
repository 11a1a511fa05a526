// Package worker is the path every SQS-fed handler takes with one record:
// decode the message, load the operation it names, lease the message,
// let the handler decide, persist the decision with one conditional write
// that is re-applied on conflict (Persist), emit the follow-up the
// persisted record expects, and report the record's failure to the batch,
// retryable or permanent (Classify decides, here only). The handlers keep
// only their decisions.
package worker
