package signals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by Send after Close began.
	ErrClosed = errors.New("signals: runtime closed")

	// ErrInvalid is wrapped by every error about bad input; the message names
	// the field. Compare with errors.Is.
	ErrInvalid = errors.New("signals: invalid argument")
)

// Signal is one message sent to a thread.
type Signal struct {
	// ID is the idempotency key of the signal. Send assigns a random UUID
	// when it is empty. A signal whose ID was already run on its thread
	// within the dedupe window is not run again.
	ID string
	// Type names the kind of signal. It is required, and may not be
	// "signals.cancel.mark", which the drop marks of Cancel carry.
	Type string
	// Data is the payload; it may be nil.
	Data json.RawMessage
	// Metadata carries headers such as trace context; it may be nil. Its
	// keys and values must be valid UTF-8 (pubsub.ValidateEvent): Send
	// returns an error wrapping ErrInvalid otherwise.
	Metadata map[string]string
	// Redelivered is set on delivery when the signal was given to an earlier
	// run that did not finish with it (its owner died or lost its lease).
	// Send ignores it.
	Redelivered bool
}

// Action says what Send did with a signal.
type Action int

const (
	// Woke means this process won the thread's lease and started a run.
	Woke Action = iota + 1
	// Delivered means the signal was queued for this process's active
	// tenure of the thread.
	Delivered
	// Forwarded means another process owns the thread; the signal waits in
	// the thread's durable inbox for that owner (or whoever takes over).
	Forwarded
)

// String returns "woke", "delivered" or "forwarded".
func (a Action) String() string {
	switch a {
	case Woke:
		return "woke"
	case Delivered:
		return "delivered"
	case Forwarded:
		return "forwarded"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Accepted is the outcome of a successful Send.
type Accepted struct {
	// Action is what happened to the signal.
	Action Action
	// RunID is, for Woke, the run this process is starting; for Delivered,
	// the local run holding the thread; for Forwarded, the remote run that
	// held the thread when the signal was accepted ("" when unknown). The
	// signal may be given to that run or to a later one of the same owner.
	RunID string
	// Owner is the lease holder of the thread: this process's run for Woke
	// and Delivered, the remote holder for Forwarded.
	Owner string
	// SignalID is the signal's ID (assigned when the caller left it empty).
	SignalID string
}

// Agent runs a thread. It is given a Run with the signal(s) that started it
// and takes follow-ups with Run.Next. Its ctx ends when the run's lease is
// lost (fail-closed) or the runtime is closed without waiting. An error
// returned is reported to the observer and the logger; the signals the run
// took still count as used. A panic, and an agent that ends its goroutine
// instead of returning (runtime.Goexit, as testing's FailNow does), end the
// run the same way, with an error saying so: the agent runs on a goroutine
// of its own.
type Agent func(ctx context.Context, run *Run) error
