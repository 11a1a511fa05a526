//go:build !unix

package handlertest

import "time"

// CPUTime is not measured on this system (0).
func CPUTime() time.Duration { return 0 }
