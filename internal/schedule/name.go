package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/genjobs/genjobs/internal/message"
)

// EventBridge Scheduler's limits on a schedule name and a client token.
const (
	maxNameLen = 64
	// MaxNamePrefix bounds Config.NamePrefix so a hashed name still keeps
	// a readable part.
	MaxNamePrefix = 24
	// hashLen hex digits (80 bits) make an accidental collision between
	// two hashed names negligible.
	hashLen    = 20
	hashMarker = "_h"
)

// actionTags shorten the actions in names: the 64 characters are better
// spent on the operation id.
var actionTags = map[message.Action]string{
	message.ActionSubmitGeneration:  "submit",
	message.ActionObserveGeneration: "observe",
	message.ActionDeliverArtifacts:  "deliver",
}

// ScheduleName is the deterministic schedule name for env: the same
// envelope always gives the same name, so a retried dispatch finds the
// schedule its first try created instead of adding a second one. The
// name is readable when it can be, prefix + action + "_" + operation id +
// "_r" + revision + "_a" + attempt, e.g. "gj-observe_op-1_r3_a7". When the
// operation id holds a character Scheduler refuses (':') or the name would
// exceed 64 characters, the name is the sanitised, truncated form followed
// by "_h" and a hash of the exact inputs. A readable name always ends in
// "_a<digits>" and a hashed one in "_h<hex>", so the two forms never meet,
// and distinct envelopes (for one prefix) get distinct names.
func ScheduleName(prefix string, env message.Envelope) string {
	tag, ok := actionTags[env.Action]
	if !ok {
		tag = string(env.Action)
	}
	rev := strconv.FormatInt(env.ExpectedRevision, 10)
	attempt := strconv.Itoa(env.Attempt)
	readable := prefix + tag + "_" + env.OperationID + "_r" + rev + "_a" + attempt
	if len(readable) <= maxNameLen && validName(readable) {
		return readable
	}
	h := identityHash(prefix, env)
	keep := maxNameLen - len(hashMarker) - hashLen
	s := sanitise(readable)
	if len(s) > keep {
		s = s[:keep]
	}
	return s + hashMarker + h[:hashLen]
}

// clientToken is Scheduler's idempotency token for the same inputs as the
// name: 64 hex digits, within its [A-Za-z0-9_-]{1,64}.
func clientToken(prefix string, env message.Envelope) string {
	return identityHash(prefix, env)
}

// identityHash hashes the exact inputs, separated by a byte no identifier
// can contain, so no two input tuples share an encoding.
func identityHash(prefix string, env message.Envelope) string {
	var b strings.Builder
	for i, part := range []string{prefix, string(env.Action), env.OperationID,
		strconv.FormatInt(env.ExpectedRevision, 10), strconv.Itoa(env.Attempt)} {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(part)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

func nameByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || c == '.' || c == '-'
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

// sanitise replaces every byte Scheduler refuses with '_'. It can merge
// distinct inputs, which is why a sanitised name always carries the hash.
func sanitise(s string) string {
	b := []byte(s)
	for i := range b {
		if !nameByte(b[i]) {
			b[i] = '_'
		}
	}
	return string(b)
}
