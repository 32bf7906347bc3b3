// Package ackhook tells a group delivery's handler when the backend has
// finished the delivery's ack (written it to the server, or given up on
// it). A backend that writes acks after the handler returns (redisstreams'
// batched acker) puts a *Hook in the handler's ctx; a handler that must
// order something after the ack (the signals runtime's owner acks a wake
// notice only after the inbox entry's ack) adds a function to it.
//
// It is internal: the hook rides in the ctx, through any wrapper that
// passes the ctx on, and is not part of the pubsub contract.
package ackhook

import (
	"context"
	"sync"
)

type ctxKey struct{}

// Hook holds the functions to call once a delivery's ack is finished. The
// zero value is ready to use.
type Hook struct {
	mu    sync.Mutex
	fns   []func()
	fired bool
}

// With returns ctx carrying h.
func With(ctx context.Context, h *Hook) context.Context {
	return context.WithValue(ctx, ctxKey{}, h)
}

// From returns the Hook ctx carries, or nil.
func From(ctx context.Context) *Hook {
	h, _ := ctx.Value(ctxKey{}).(*Hook)
	return h
}

// Add registers f, to be called once by Fire; when Fire was already
// called, it calls f at once. f must not block.
func (h *Hook) Add(f func()) {
	h.mu.Lock()
	if h.fired {
		h.mu.Unlock()
		f()
		return
	}
	h.fns = append(h.fns, f)
	h.mu.Unlock()
}

// Fire calls the functions added, each once: the ack was written, or the
// backend gave up on it. Later calls do nothing. A backend fires only for
// a delivery it acks: for one nacked, dead-lettered or handed back, the
// handler knows from its own verdict.
func (h *Hook) Fire() {
	h.mu.Lock()
	if h.fired {
		h.mu.Unlock()
		return
	}
	h.fired = true
	fns := h.fns
	h.fns = nil
	h.mu.Unlock()
	for _, f := range fns {
		f()
	}
}
