package faultsim

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/genjobs/genjobs/internal/dev/localqueue"
)

// leaseTruth is the queue's truth about one received message.
type leaseTruth struct {
	handle string    // the current receipt handle
	until  time.Time // hidden until then
}

// granted notes a receive: the message is hidden for its queue's
// visibility under a new handle.
func (w *world) granted(queueURL, msgID, handle string) {
	w.mu.Lock()
	w.leases[msgID] = leaseTruth{handle: handle, until: w.clk.Now().Add(w.vis[queueURL])}
	w.mu.Unlock()
}

// hidden notes a successful visibility change of handle: hidden for d
// from now (rounded up to whole seconds, as the queue counts).
func (w *world) hidden(msgID, handle string, d time.Duration) {
	d = (d + time.Second - 1).Truncate(time.Second)
	w.mu.Lock()
	if l, ok := w.leases[msgID]; ok && l.handle == handle {
		w.leases[msgID] = leaseTruth{handle: handle, until: w.clk.Now().Add(d)}
	}
	w.mu.Unlock()
}

// acknowledged forgets a message its current holder deleted.
func (w *world) acknowledged(msgID, handle string) {
	w.mu.Lock()
	if l, ok := w.leases[msgID]; ok && l.handle == handle {
		delete(w.leases, msgID)
	}
	w.mu.Unlock()
}

// changeVisibility changes a message's visibility on the queue and keeps
// the lease truth.
func (w *world) changeVisibility(queueURL, msgID, handle string, d time.Duration) error {
	err := w.broker.ChangeVisibility(context.Background(), queueURL, handle, d)
	if err == nil {
		w.hidden(msgID, handle, d)
	}
	return err
}

// receiveGap injects ReceiveGap into an invocation about to start.
func (w *world) receiveGap(inv *invocation) {
	if inv.depth > 0 || inv.m == nil || !w.inj.roll(ReceiveGap) {
		return
	}
	// Mostly 1-45 s; a third of the time a throttled invoke, from 30 s
	// short of the visibility to 15 s beyond it.
	vis := w.vis[inv.queueURL]
	gap := time.Duration(1+w.inj.intn(ReceiveGap, 45)) * time.Second
	if w.inj.intn(ReceiveGap, 3) == 0 {
		gap = max(time.Second, vis-30*time.Second+time.Duration(w.inj.intn(ReceiveGap, 46))*time.Second)
	}
	hit := false
	for i, r := range inv.records {
		if err := w.changeVisibility(inv.queueURL, r.MessageId, r.ReceiptHandle, max(0, vis-gap)); err != nil && !errors.Is(err, localqueue.ErrNotInFlight) {
			continue
		}
		hit = true
		w.tracef(inv.ops[i], "FAULT %s: %s starts %s after the mapping received message %s (visibility %s)", ReceiveGap, inv.fn, gap, shortID(r.MessageId), vis)
	}
	if hit {
		w.inj.note(ReceiveGap)
	}
}

// authorityAt says why the worker behind inv has no authority to POST
// for record i now ("" if it has), by CheckAuthority.
func (w *world) authorityAt(inv *invocation, i int, need time.Duration) string {
	r := inv.records[i]
	w.mu.Lock()
	l, ok := w.leases[r.MessageId]
	w.mu.Unlock()
	left := time.Duration(math.MaxInt64)
	if !inv.deadline.IsZero() {
		left = inv.deadline.Sub(w.clk.Now())
	}
	return CheckAuthority(ok && l.handle == r.ReceiptHandle, l.until.Sub(w.clk.Now()), left, need)
}

// timeUsed injects InvocationTimeUsed into an invocation about to start,
// returning the context the handler gets.
func (w *world) timeUsed(ctx context.Context, inv *invocation) context.Context {
	if inv.depth > 0 || inv.m == nil || inv.fn == "triage" || !w.inj.roll(InvocationTimeUsed) {
		return ctx
	}
	// At most a minute left: where each function must decide whether its
	// step still fits, which a draw over the whole timeout seldom hits.
	window := min(inv.m.Timeout, time.Minute)
	left := time.Duration(1+w.inj.intn(InvocationTimeUsed, int(window/time.Second)-1)) * time.Second
	w.inj.note(InvocationTimeUsed)
	for _, op := range inv.ops {
		w.tracef(op, "FAULT %s: %s reaches its batch with %s of its %s timeout left", InvocationTimeUsed, inv.fn, left, inv.m.Timeout)
	}
	return nearDeadline{Context: ctx, at: w.clk.Now().Add(left)}
}

// nearDeadline is a context whose Deadline is nearer than its parent's.
// It is never cancelled for it: no virtual time passes inside a handler.
type nearDeadline struct {
	context.Context
	at time.Time
}

// Deadline is the nearer deadline.
func (c nearDeadline) Deadline() (time.Time, bool) { return c.at, true }
