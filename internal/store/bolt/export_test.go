package bolt

// OpenTimeout lets the external tests open a Store with a short lock
// timeout, so the lock test does not wait LockTimeout.
var OpenTimeout = openTimeout
