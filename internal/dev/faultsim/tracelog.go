package faultsim

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// traceLog is the handlers' logger: it counts every decision they log
// (Result.Paths) and copies every line about a traced operation into that
// operation's history, so a violation's history says what each handler
// decided, in its own words.
type traceLog struct {
	w     *world
	attrs []slog.Attr
}

// Enabled is true from Info up (every decision a handler logs counts as a
// path), and below while anything is traced.
func (h *traceLog) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.w.traceAll || len(h.w.traceOps) > 0
}

// Handle counts the decision the line reports (Result.Paths) and copies
// a line about a traced operation into its history.
func (h *traceLog) Handle(_ context.Context, r slog.Record) error {
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
	return nil
}

// WithAttrs keeps the attributes for Handle (the function name, say).
func (h *traceLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &traceLog{w: h.w, attrs: append(slices.Clone(h.attrs), as...)}
}

// WithGroup ignores the group: the history names attributes by key.
func (h *traceLog) WithGroup(string) slog.Handler { return h }

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
