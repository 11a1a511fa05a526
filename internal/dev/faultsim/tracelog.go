package faultsim

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// traceLog is the handlers' logger: it copies every log line about a
// traced operation into that operation's history (so a violation's
// history says what each handler decided, in its own words) and passes
// everything on to the configured logger.
type traceLog struct {
	w     *world
	next  slog.Handler
	attrs []slog.Attr
}

// Enabled is true from Info up (every decision a handler logs counts as a
// path, see Result.Paths), and below while anything is traced or the next
// handler wants it.
func (h *traceLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.w.traceAll || len(h.w.traceOps) > 0 || h.next.Enabled(ctx, l)
}

// Handle counts the decision the line reports (Result.Paths) and copies
// a line about a traced operation into its history.
func (h *traceLog) Handle(ctx context.Context, r slog.Record) error {
	op, fn, why := "", "", ""
	var parts []string
	add := func(a slog.Attr) {
		switch a.Key {
		case "operation_id":
			op = a.Value.Resolve().String()
		case "function":
			fn = a.Value.Resolve().String()
		default:
			if a.Key == "reason" || a.Key == "did" {
				why = a.Value.Resolve().String()
			}
			parts = append(parts, a.Key+"="+format(a.Value))
		}
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	if r.Level >= slog.LevelInfo {
		key := fn + ": " + r.Message
		if why != "" {
			key += " (" + why + ")"
		}
		h.w.countPath(key)
	}
	if h.w.traced(op) {
		h.w.tracef(op, "%s log: %s %s", fn, r.Message, strings.Join(parts, " "))
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// WithAttrs keeps the attributes for Handle (the function name, say).
func (h *traceLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceLog{w: h.w, next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup passes the group on.
func (h *traceLog) WithGroup(name string) slog.Handler {
	return &traceLog{w: h.w, next: h.next.WithGroup(name), attrs: h.attrs}
}

var _ slog.Handler = (*traceLog)(nil)

// format prints a log value as the handlers meant it: LogValue methods
// resolved at every level (they are what redacts secrets), groups as
// {k=v ...}.
func format(v slog.Value) string {
	v = v.Resolve()
	if v.Kind() != slog.KindGroup {
		return v.String()
	}
	var parts []string
	for _, a := range v.Group() {
		parts = append(parts, a.Key+"="+format(a.Value))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// String keeps fmt from printing the world.
func (h *traceLog) String() string { return fmt.Sprintf("traceLog(%d attrs)", len(h.attrs)) }
