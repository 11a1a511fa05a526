package store

// OpenBoltTimeout lets the external tests open a Bolt with a short lock
// timeout, so the lock test does not wait BoltLockTimeout.
var OpenBoltTimeout = openBolt
