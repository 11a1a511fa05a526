package pipeline

import "testing"

// TestLoopbackHost: the local API answers only its own loopback names, so
// a page that reaches 127.0.0.1 under another name (DNS rebinding) is
// refused.
func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1:8790": true, "[::1]:8790": true, "localhost:8790": true,
		"127.0.0.1:8791": false, "attacker.example:8790": false, "127.0.0.1": false, "": false, "10.0.0.1:8790": false,
	} {
		if got := loopbackHost(host, 8790); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
