package genace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genjobs/genjobs/internal/message"
)

// RemoteState is Genace's job state enum. It is Genace's vocabulary, not
// the caller's workflow state, so it is kept as its own type to stop the
// two from being mixed up.
type RemoteState string

// The states Genace reports. Any other value fails decoding: guessing what
// an unknown state means could mark an unfinished (or still charging) job
// as done.
const (
	// RemoteQueued: accepted, waiting for render capacity.
	RemoteQueued RemoteState = "queued"
	// RemoteRunning: rendering now.
	RemoteRunning RemoteState = "running"
	// RemoteSucceeded: terminal; outputs are available via signed URLs.
	RemoteSucceeded RemoteState = "succeeded"
	// RemoteFailed: terminal; check Credits.RefundState before treating the
	// money side as finished.
	RemoteFailed RemoteState = "failed"
	// RemoteCanceled: terminal; canceled on Genace's side.
	RemoteCanceled RemoteState = "canceled"
)

// Valid reports whether s is one of Genace's documented states.
func (s RemoteState) Valid() bool {
	switch s {
	case RemoteQueued, RemoteRunning, RemoteSucceeded, RemoteFailed, RemoteCanceled:
		return true
	}
	return false
}

// IsTerminal reports whether the render can no longer change. A terminal
// state does not end the caller's work: outputs still need copying and a
// failed job's refund still needs to settle.
func (s RemoteState) IsTerminal() bool {
	return s == RemoteSucceeded || s == RemoteFailed || s == RemoteCanceled
}

// RefundState is the compensation progress of a job's credits.
type RefundState string

// The refund states Genace reports. Unknown values fail decoding for the
// same reason as unknown job states: money state must never be guessed.
const (
	// RefundNone: no refund is in progress or due. On a failed job this
	// means no refund will come (e.g. an operator reconciled it).
	RefundNone RefundState = "none"
	// RefundPending: a refund is owed and not yet settled.
	RefundPending RefundState = "pending"
	// RefundSettled: the refund is complete; Refunded holds the amount.
	RefundSettled RefundState = "settled"
)

// Valid reports whether r is one of Genace's documented refund states.
func (r RefundState) Valid() bool {
	return r == RefundNone || r == RefundPending || r == RefundSettled
}

// Job is a decoded, validated Genace job. Decoding guarantees ID is a
// valid job id (message.ValidJobID), State and Credits.RefundState are
// known values and credit amounts are non-negative.
type Job struct {
	ID                string
	Model             string
	State             RemoteState
	SubmissionFailure bool // true for a job created by a 5xx "known submission failure"
	Progress          float64
	CreatedAt         time.Time
	UpdatedAt         time.Time
	StartedAt         *time.Time
	FinishedAt        *time.Time
	Outputs           []Output
	Error             *JobError
	Credits           Credits
	Metadata          map[string]string
}

// LogValue summarises the job for slog without outputs' signed URLs or
// free-form metadata, so logging a job is always safe.
func (j *Job) LogValue() slog.Value {
	if j == nil {
		return slog.StringValue("<nil>")
	}
	attrs := []slog.Attr{
		slog.String("id", j.ID),
		slog.String("model", j.Model),
		slog.String("state", string(j.State)),
		slog.Bool("submission_failure", j.SubmissionFailure),
		slog.Float64("progress", j.Progress),
		slog.Int("outputs", len(j.Outputs)),
		slog.Int64("reserved", j.Credits.Reserved),
		slog.Int64("charged", j.Credits.Charged),
		slog.Int64("refunded", j.Credits.Refunded),
		slog.String("refund_state", string(j.Credits.RefundState)),
	}
	if j.Error != nil {
		attrs = append(attrs, slog.String("error_code", j.Error.Code))
	}
	return slog.GroupValue(attrs...)
}

// Output is one rendered artifact. URL is a SignedURL so that printing an
// Output never prints the URL.
type Output struct {
	URL         SignedURL
	ContentType string
	SizeBytes   int64
	SHA256      string // lowercase hex of the content, for verifying copies
}

// LogValue prints the output's metadata with the URL redacted.
func (o Output) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", redactedURL),
		slog.String("content_type", o.ContentType),
		slog.Int64("size_bytes", o.SizeBytes),
		slog.String("sha256", o.SHA256),
	)
}

// JobError is Genace's reason for a failed job. Code "reconciled" means an
// operator failed the job and no refund is coming.
type JobError struct {
	Code    string
	Message string
}

// Credits is the money side of a job. Reserved is what was held at
// acceptance, Charged what was billed and Refunded what came back; only
// RefundState tells whether a refund is still moving.
type Credits struct {
	Reserved    int64
	Charged     int64
	Refunded    int64
	RefundState RefundState
}

// wireJob mirrors the JSON job object. Pointers mark fields whose absence
// must be detected.
type wireJob struct {
	ID                *string           `json:"id"`
	Model             string            `json:"model"`
	State             *string           `json:"state"`
	SubmissionFailure bool              `json:"submission_failure"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	StartedAt         *time.Time        `json:"started_at"`
	FinishedAt        *time.Time        `json:"finished_at"`
	Progress          float64           `json:"progress"`
	Outputs           []wireOutput      `json:"outputs"`
	Error             *wireJobError     `json:"error"`
	Credits           *wireCredits      `json:"credits"`
	Metadata          map[string]string `json:"metadata"`
}

type wireOutput struct {
	URL         string `json:"url"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
}

type wireJobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type wireCredits struct {
	Reserved    int64   `json:"reserved"`
	Charged     int64   `json:"charged"`
	Refunded    int64   `json:"refunded"`
	RefundState *string `json:"refund_state"`
}

// validID is the one definition of a job id, message.ValidJobID: an id
// the client hands back is one every follow-up message can carry. An id
// outside it is not dropped: see namedIn.
func validID(id string) bool { return message.ValidJobID(id) }

// named is what a body says about which job it concerns, read before and
// independently of the rest of it.
type named struct {
	id       string // the one valid job id the body names, or ""
	evidence string // else: what it named instead (bad or conflicting ids), quoted and capped; "" if nothing
}

// namedIn reads the value at path (object keys from the top) and nothing
// else, tolerating every other departure from the contract: wrong types
// and junk elsewhere, unknown fields, a body that breaks off after the
// value. A null or absent value names nothing; a key given twice with
// different values names no job, only evidence.
func namedIn(data []byte, path ...string) named {
	var seen []string // distinct renderings, "s:" + string or "x:" + description
	add := func(v string) {
		if !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err == nil && t == json.Delim('{') {
		_ = scanObject(dec, path, add) // a syntax error ends the scan; what came before stands
	}
	switch {
	case len(seen) == 0:
		return named{}
	case len(seen) == 1 && strings.HasPrefix(seen[0], "s:") && validID(seen[0][2:]):
		return named{id: seen[0][2:]}
	}
	var ev []string
	for _, v := range seen {
		if s, ok := strings.CutPrefix(v, "s:"); ok {
			ev = append(ev, evidenceOf(s))
		} else {
			ev = append(ev, v[2:])
		}
	}
	return named{evidence: truncate(strings.Join(ev, ", "), maxEvidence)}
}

// maxEvidence caps what a bad id can put in a log line or a review.
const maxEvidence = 300

// evidenceOf renders a job id outside the definition so an operator can
// search Genace for it: quoted, ASCII, capped, and cut at '?' or '#',
// where a URL would carry its signature.
func evidenceOf(s string) string {
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i] + "?[redacted]"
	}
	return strconv.QuoteToASCII(truncate(s, 128))
}

// scanObject walks the members of an object whose '{' was read, calling
// add for each value found at path.
func scanObject(dec *json.Decoder, path []string, add func(string)) error {
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		// Keys match as encoding/json matches them, case-insensitively, so
		// the two readings of a body cannot name different jobs.
		if key, _ := t.(string); !strings.EqualFold(key, path[0]) {
			if err := skipValue(dec); err != nil {
				return err
			}
			continue
		}
		if t, err = dec.Token(); err != nil {
			return err
		}
		d, isDelim := t.(json.Delim)
		switch {
		case len(path) > 1 && d == '{':
			err = scanObject(dec, path[1:], add)
		case isDelim:
			if len(path) == 1 {
				add("x:" + map[json.Delim]string{'{': "an object", '[': "an array"}[d])
			}
			err = skipRest(dec)
		case len(path) > 1 || t == nil:
			// A scalar where an object was expected, or null: names nothing.
		default:
			if v, ok := t.(string); ok {
				add("s:" + v)
			} else {
				add(fmt.Sprintf("x:%v", t)) // a number or a boolean
			}
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token() // the closing '}'
	return err
}

// skipValue skips one value, scalar or nested.
func skipValue(dec *json.Decoder) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if _, ok := t.(json.Delim); ok {
		return skipRest(dec)
	}
	return nil
}

// skipRest skips to the end of the object or array whose opening
// delimiter was just read.
func skipRest(dec *json.Decoder) error {
	for depth := 1; depth > 0; {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// decodeJob strictly decodes one job object. Unknown fields are tolerated
// so additive API changes do not break polling, but unknown enum values,
// missing required fields, negative credits, bad output URLs and trailing
// data are errors.
func decodeJob(data []byte) (*Job, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var w wireJob
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("job json: %w", stripJSONErr(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("job json: trailing data after object")
	}
	if w.ID == nil {
		return nil, errors.New("job: missing id")
	}
	if !validID(*w.ID) {
		return nil, errors.New("job: invalid id")
	}
	if w.State == nil {
		return nil, errors.New("job: missing state")
	}
	st := RemoteState(*w.State)
	if !st.Valid() {
		return nil, fmt.Errorf("job: unknown state %s", enumText(*w.State))
	}
	if w.Credits == nil {
		return nil, errors.New("job: missing credits")
	}
	if w.Credits.RefundState == nil {
		return nil, errors.New("job: missing credits.refund_state")
	}
	rs := RefundState(*w.Credits.RefundState)
	if !rs.Valid() {
		return nil, fmt.Errorf("job: unknown refund_state %s", enumText(*w.Credits.RefundState))
	}
	if w.Credits.Reserved < 0 || w.Credits.Charged < 0 || w.Credits.Refunded < 0 {
		return nil, errors.New("job: negative credits")
	}
	j := &Job{
		ID:                *w.ID,
		Model:             w.Model,
		State:             st,
		SubmissionFailure: w.SubmissionFailure,
		Progress:          clamp01(w.Progress),
		CreatedAt:         w.CreatedAt,
		UpdatedAt:         w.UpdatedAt,
		StartedAt:         w.StartedAt,
		FinishedAt:        w.FinishedAt,
		Credits: Credits{
			Reserved:    w.Credits.Reserved,
			Charged:     w.Credits.Charged,
			Refunded:    w.Credits.Refunded,
			RefundState: rs,
		},
		Metadata: w.Metadata,
	}
	if w.Error != nil {
		j.Error = &JobError{Code: w.Error.Code, Message: w.Error.Message}
	}
	for i, o := range w.Outputs {
		if err := validOutputURL(o.URL); err != nil {
			// The index, never the URL: the URL is a secret.
			return nil, fmt.Errorf("job: output %d: %w", i, err)
		}
		if o.SizeBytes < 0 {
			return nil, fmt.Errorf("job: output %d: negative size_bytes", i)
		}
		j.Outputs = append(j.Outputs, Output{
			URL:         SignedURL(o.URL),
			ContentType: o.ContentType,
			SizeBytes:   o.SizeBytes,
			SHA256:      o.SHA256,
		})
	}
	return j, nil
}

// validOutputURL checks that a signed URL is an absolute http(s) URL. Its
// error never includes the URL.
func validOutputURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("unparseable url")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("url is not absolute http(s)")
	}
	return nil
}

// stripJSONErr keeps JSON syntax/type errors but drops the offending input
// (a type error can quote a value), since the body could carry a URL.
func stripJSONErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("syntax error at offset %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q: wrong type %s", te.Field, te.Value)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("truncated or empty body")
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return errors.New("bad timestamp")
	}
	return errors.New("invalid json")
}

// enumText quotes an unknown enum value for an error, or says it is not a
// plain token: an error must never carry a piece of body that could be a
// URL.
func enumText(v string) string {
	if len(v) == 0 || len(v) > 32 {
		return "(not a token)"
	}
	for _, r := range v {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '_' || r == '-') {
			return "(not a token)"
		}
	}
	return strconv.Quote(v)
}

func clamp01(f float64) float64 {
	if f < 0 {
		return 0
	}
	if f > 1 {
		return 1
	}
	return f
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
