package signals

import (
	"context"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// Hooks are called at points of a tenure's end; a hook may block to hold the
// tenure there.
type Hooks struct {
	// LingerEnd is called when the linger time passed without a delivery,
	// before the tenure stops reading its inbox.
	LingerEnd func(thread string)
	// BeforeRelease is called after the tenure stopped reading its inbox
	// (unsubscribed) and before it releases the lease.
	BeforeRelease func(thread string)
	// BeforeHandOff is called when a run ended and a delivery was taken for
	// the next one, before the lease is transferred to it.
	BeforeHandOff func(thread string)
	// BeforeAdopt is called when a try (not a takeover's own) found the
	// lease held by a run of this runtime that never started (givenup.go),
	// before it takes the lease over for that run.
	BeforeAdopt func(thread string)
}

// WithHooks sets test hooks on one Runtime.
func WithHooks(h Hooks) Option {
	return func(c *config) error {
		c.hooks = testHooks{lingerEnd: h.LingerEnd, beforeRelease: h.BeforeRelease, beforeHandOff: h.BeforeHandOff, beforeAdopt: h.BeforeAdopt}
		return nil
	}
}

// WithInboxExpiryFloor replaces the 10-minute floor of the inboxes'
// drained expiry (minInboxExpiry) with d, so that a test sees a killed
// owner's inboxes go within seconds.
func WithInboxExpiryFloor(d time.Duration) Option {
	return func(c *config) error {
		c.hooks.expiryFloor = &d
		return nil
	}
}

// WakeNotice returns the wake notice Send publishes for signal id of thread
// (without its Action), for tests that replay one.
func WakeNotice(thread, id string) pubsub.Event {
	return pubsub.Event{Type: WakeType, Metadata: noticeMeta(thread, id)}
}

// LapseEntries returns how many threads rt's lapse watch (lapse.go) holds.
func LapseEntries(rt *Runtime) int { return rt.lapse.len() }

// GivenUp returns how many given-up acquires of thread's lease rt
// remembers (givenup.go).
func GivenUp(rt *Runtime, thread string) int {
	rt.guMu.Lock()
	defer rt.guMu.Unlock()
	return len(rt.givenUp[thread])
}

// ReleaseGivenUp runs what Close does last for the runs of unknown outcome
// rt remembers: it releases their leases (givenup.go).
func ReleaseGivenUp(ctx context.Context, rt *Runtime) { rt.releaseGivenUp(ctx) }

// RecordKey is the lease key of thread's done record.
func RecordKey(thread string) string { return recordKey(thread) }

// RecordHas reports whether the done record rec holds signal id.
func RecordHas(rec, id string) bool { return recordHas(rec, id) }

// TidyLater has the runtime tidy thread's inbox later, as a tenure whose
// drained inbox could not be deleted does.
func (rt *Runtime) TidyLater(thread string) { rt.tidyLater(thread) }

// Footprint returns the sizes of rt's in-process tables that can grow with
// threads (review h71): tenures, notices seen, tenure ends, watches, tidy
// entries, given-up acquires, adoptions, lapse entries, the done cache, and
// the Cancels waiting for an answer.
func Footprint(rt *Runtime) map[string]int {
	m := map[string]int{}
	rt.mu.Lock()
	m["sessions"], m["adopting"] = len(rt.sessions), len(rt.adopting)
	rt.mu.Unlock()
	rt.seenMu.Lock()
	m["seen"], m["ends"] = len(rt.seen), len(rt.ends)
	rt.seenMu.Unlock()
	rt.watchMu.Lock()
	m["watching"] = len(rt.watching)
	rt.watchMu.Unlock()
	rt.tidyMu.Lock()
	m["tidy"] = len(rt.tidy)
	rt.tidyMu.Unlock()
	rt.guMu.Lock()
	m["givenUp"] = len(rt.givenUp)
	rt.guMu.Unlock()
	m["lapse"] = rt.lapse.len()
	rt.done.mu.Lock()
	m["doneCache"] = len(rt.done.set)
	rt.done.mu.Unlock()
	if rt.ctl != nil {
		rt.ctl.mu.Lock()
		m["ctlWaiting"] = len(rt.ctl.waiting)
		rt.ctl.mu.Unlock()
	}
	return m
}
