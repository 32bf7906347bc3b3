package signals

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// Run is one run of the agent on a thread. A Run is used by the agent's
// goroutine only; its methods are not safe for concurrent use.
type Run struct {
	// ID identifies the run.
	ID string
	// Thread is the thread the run owns.
	Thread string
	// Token is the fencing token of the run's lease tenure, greater than every
	// earlier run's on the thread. Pass it with effects (with the signal ID)
	// so that a resource can reject a stale owner.
	Token uint64
	// Owner is the lease owner of the run: a holder token unique per tenure.
	Owner string
	// Signals are the signals the run started with.
	Signals []Signal
	// Redelivered tells, per entry of Signals, whether an earlier owner was
	// given that signal and did not finish with it.
	Redelivered []bool

	s    *session
	held *lease.Held
	ctx  context.Context
	cur  []delivery
}

// Next declares the signals the run has taken so far handled and returns the
// next follow-up signal of the thread, waiting at most the next-wait time
// (WithNextWait) for one that is not delivered yet. It reports false when
// none arrived, ctx or the run's context ended, or the runtime is closing;
// signals that arrive later start the next run. "Delivered" here means read
// from the thread's inbox by this process, which a Send that returned
// Delivered does not wait for: under load the read can take longer than
// the next wait, and the signal then starts the next run rather than
// coming through Next (still once, and in order). A duplicate signal ID is
// skipped.
//
// ctx bounds the wait for the next signal, not the recording of the
// signals taken so far, which comes first (the done record's write, then
// their acks): on a server that stopped answering that write is tried
// until it succeeds, gives up (2s) or the run's lease is lost (its loss
// deadline, under the lease TTL), whatever ctx does; Next then reports
// false.
func (r *Run) Next(ctx context.Context) (Signal, bool) {
	if r.ctx.Err() != nil {
		return Signal{}, false
	}
	ok := r.s.complete(r.held, r.cur)
	r.cur = nil
	if !ok {
		return Signal{}, false // the lease was lost: the next owner gets them again
	}
	timer := time.NewTimer(r.s.rt.cfg.nextWait)
	defer timer.Stop()
	for {
		select {
		case d := <-r.s.deliveries:
			if r.s.rt.closingNow() {
				// Both were ready and select chose the delivery: closing
				// wins, the signal stays in the inbox for the next owner.
				d.res <- errRetry
				return Signal{}, false
			}
			if r.s.skip(d) {
				continue
			}
			r.cur = []delivery{d}
			sig := toSignal(d.ev)
			r.s.rt.emit(Event{Kind: SignalGiven, Thread: r.Thread, RunID: r.ID, Owner: r.Owner, Token: r.Token, Signals: []Signal{sig}})
			return sig, true
		case <-timer.C:
		case <-ctx.Done():
		case <-r.ctx.Done():
		case <-r.s.rt.closing:
		}
		return Signal{}, false
	}
}

// Context returns the run's context: the one given to the agent.
func (r *Run) Context() context.Context { return r.ctx }
