package genace

import (
	"fmt"
	"log/slog"
)

// redactedURL is what every printing path shows instead of a signed URL.
const redactedURL = "[signed-url]"

// SignedURL is a pre-signed, expiring output URL returned by Genace.
//
// Anyone holding the URL can fetch the output until it expires, so it is
// a secret in transit: it must never reach a queue body, a log line, a
// metric or an error string. Every formatting path (fmt verbs, slog,
// encoding/json, encoding.TextMarshaler) prints "[signed-url]"; the one
// place that must dial it calls Reveal explicitly, which keeps leaks
// greppable in review.
type SignedURL string

// Reveal returns the real URL. Call it only to dial the URL; never log,
// persist or wrap the result in an error.
func (u SignedURL) Reveal() string { return string(u) }

// String redacts the URL so %s and %v cannot leak it.
func (u SignedURL) String() string { return redactedURL }

// GoString redacts the URL so %#v cannot leak it.
func (u SignedURL) GoString() string { return redactedURL }

// Format redacts the URL for every fmt verb (%x and %q included), since
// fmt would otherwise print the underlying string for verbs that bypass
// String.
func (u SignedURL) Format(f fmt.State, verb rune) {
	_, _ = f.Write([]byte(redactedURL))
}

// LogValue redacts the URL in slog output.
func (u SignedURL) LogValue() slog.Value { return slog.StringValue(redactedURL) }

// MarshalJSON redacts the URL because slog's JSON handler (and any
// accidental json.Marshal of a Job into a queue body) encodes nested
// fields with encoding/json, which ignores LogValue.
func (u SignedURL) MarshalJSON() ([]byte, error) { return []byte(`"` + redactedURL + `"`), nil }

// MarshalText redacts the URL for text encoders (and map keys).
func (u SignedURL) MarshalText() ([]byte, error) { return []byte(redactedURL), nil }

// IsZero reports whether the URL is empty, without revealing it.
func (u SignedURL) IsZero() bool { return u == "" }

// secret holds the Authorization header value. It redacts itself in every
// printing path so the API key cannot leak even if a secret value is
// formatted directly.
type secret string

// String redacts the key.
func (secret) String() string { return "[redacted]" }

// GoString redacts the key for %#v.
func (secret) GoString() string { return "[redacted]" }

// Format redacts the key for every fmt verb.
func (secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte("[redacted]")) }

// LogValue redacts the key in slog.
func (secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalJSON redacts the key in JSON.
func (secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// MarshalText redacts the key in text encodings.
func (secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }
