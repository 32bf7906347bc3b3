package signals

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// Defaults of the options.
const (
	// DefaultLeaseTTL is the TTL of a thread's lease.
	DefaultLeaseTTL = 15 * time.Second
	// DefaultRecoveryInterval is how often a runtime holding a wake notice
	// for a thread leased elsewhere checks again whether the owner finished
	// the signal or died.
	DefaultRecoveryInterval = time.Second
	// DefaultLinger is how long a tenure waits for the next inbox signal after
	// a run ended before it releases the thread. A lingering tenure costs a
	// lease renewal (batched) and a few goroutines, no connection, and a
	// follow-up sent while it lingers is a Delivered or Forwarded send
	// rather than a new tenure (BenchmarkSignalsThroughput, 2026-11-23:
	// 4,592-5,321 signals/s and 0.8 Redis round trips per signal, against
	// 2,333-3,252 and 3.9-6.9 with 200ms, the default before the inbox was
	// read on demand; BENCHMARKS.md, "Sixth pass").
	DefaultLinger = 2 * time.Second
	// DefaultNextWait is how long Run.Next waits for a follow-up that is not
	// yet delivered before it reports none.
	DefaultNextWait = 20 * time.Millisecond
	// DefaultDedupeWindow is how long a thread remembers the IDs of the
	// signals it ran (at most DedupeEntries of them).
	DefaultDedupeWindow = time.Hour
	// DedupeEntries is how many recent signal IDs a thread's done record
	// keeps.
	DedupeEntries = 256
	// DefaultWorkConcurrency is how many wake notices a runtime handles at
	// once.
	DefaultWorkConcurrency = 64

	// MinInterval is the shortest renew and recovery interval: shorter ones
	// would make the runtime spin on lease calls.
	MinInterval = time.Millisecond
	// MaxLeaseTTL is the longest lease TTL: a dead owner's threads wait up to
	// a TTL to be taken over, and longer TTLs approach the limits of the
	// backends' expiry arithmetic.
	MaxLeaseTTL = 24 * time.Hour
	// MaxDedupeWindow is the longest dedupe window.
	MaxDedupeWindow = 30 * 24 * time.Hour
)

// Event is one thing the runtime did, given to the observer set with
// WithObserver. Fields that do not apply to a Kind are zero.
type Event struct {
	Kind EventKind
	// Time is when it happened: for RunStarted, when the runtime
	// committed to the run (the agent is called just after); for Closing,
	// when Close began. No RunStarted event of a runtime has a Time after
	// its Closing event's, though the observer may be called for a run
	// started just before Close after it is called for Closing (and for
	// the teardown's Released events before it: Close emits Closing
	// once its teardown started, and the observer may call Close).
	Time    time.Time
	Process string // the runtime's process ID
	Thread  string
	RunID   string
	Owner   string // the lease owner of the run (a holder token unique per tenure)
	Token   uint64 // the fencing token of the run
	// Signals are the signals a run started with (RunStarted), the one given
	// (SignalGiven, SignalSkipped) or sent (Sent).
	Signals []Signal
	// Action is Send's outcome (Sent).
	Action Action
	// PrevRunID, PrevOwner and PrevToken name the run handing the lease
	// over (HandedOff).
	PrevRunID string
	PrevOwner string
	PrevToken uint64
	// Err is the agent's error (RunEnded), why the lease was lost (LeaseLost)
	// or why a send failed.
	Err error
}

// EventKind names an Event.
type EventKind int

const (
	// Sent: Send accepted a signal (Action, Signals, Owner, RunID).
	Sent EventKind = iota + 1
	// TenureStarted: this process acquired a thread's lease (Owner, Token,
	// RunID of the first run). Recovered is the variant for a wake notice.
	TenureStarted
	// Recovered: this process took over a thread from a wake notice: the
	// previous owner died, or finished without seeing the signal.
	Recovered
	// RunStarted: a run began (RunID, Owner, Token, Signals).
	RunStarted
	// SignalGiven: Run.Next gave a follow-up to a running run.
	SignalGiven
	// SignalSkipped: a duplicate signal ID was dropped without running.
	SignalSkipped
	// RunEnded: an agent returned (Err is its error).
	RunEnded
	// HandedOff: a run's lease moved to the next run with TransferLease
	// (Prev* name the previous run).
	HandedOff
	// LeaseLost: a tenure lost its lease; the run's ctx was cancelled.
	// It comes once the run returned, before the tenure's clean-up (which
	// may wait for a server that does not answer).
	LeaseLost
	// Released: the tenure ended and handed the lease back.
	Released
	// Cancelled: Runtime.Cancel reached this process's tenure of a thread:
	// the run's ctx was cancelled (RunID, Token; Err is the cause), or, in
	// the middle of a hand-off, will be as soon as the next run starts (an
	// event without RunID, followed by one with it).
	Cancelled
	// Closing: Close began (Time); no run of this runtime starts after it.
	Closing
)

var kindNames = [...]string{"", "sent", "tenure-started", "recovered", "run-started", "signal-given",
	"signal-skipped", "run-ended", "handed-off", "lease-lost", "released", "cancelled", "closing"}

// String returns the kind's name, such as "run-started".
func (k EventKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Option configures New.
type Option func(*config) error

type config struct {
	ttl, renew, recovery    time.Duration
	linger, nextWait, dedup time.Duration
	logger                  *slog.Logger
	process                 string
	observer                func(Event)
	workConcurrency         int
	hooks                   testHooks
}

// testHooks are called at points of a session's end, so that tests can make
// a Send land there deterministically (set through export_test.go only).
type testHooks struct {
	lingerEnd     func(thread string) // the linger time passed; still subscribed
	beforeRelease func(thread string) // unsubscribed, still holding the lease
	beforeHandOff func(thread string) // a delivery taken for the next run, before TransferLease
	beforeAdopt   func(thread string) // a try found the lease held by a remembered late run, before it takes it over
	expiryFloor   *time.Duration      // replaces minInboxExpiry
}

// WithLeaseTTL sets the TTL of thread leases (default DefaultLeaseTTL). A
// dead owner's threads are taken over within about TTL + recovery interval.
// d must be within [10ms, MaxLeaseTTL].
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) error {
		switch {
		case d < 10*time.Millisecond:
			return fmt.Errorf("%w: WithLeaseTTL: lease ttl %v is below 10ms", ErrInvalid, d)
		case d > MaxLeaseTTL:
			return fmt.Errorf("%w: WithLeaseTTL: lease ttl %v is above %v (MaxLeaseTTL)", ErrInvalid, d, MaxLeaseTTL)
		}
		c.ttl = d
		return nil
	}
}

// WithRenewInterval sets how often held leases are renewed (default a third
// of the TTL). It must be at least MinInterval (1ms) and shorter than the TTL.
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinInterval {
			return fmt.Errorf("%w: WithRenewInterval: renew interval %v is below %v", ErrInvalid, d, MinInterval)
		}
		c.renew = d
		return nil
	}
}

// WithRecoveryInterval sets how often a wake notice for a thread leased
// elsewhere is checked again (default DefaultRecoveryInterval). d must be
// at least MinInterval (1ms).
func WithRecoveryInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinInterval {
			return fmt.Errorf("%w: WithRecoveryInterval: recovery interval %v is below %v", ErrInvalid, d, MinInterval)
		}
		c.recovery = d
		return nil
	}
}

// WithLinger sets how long a tenure waits for another inbox signal after a
// run before it releases the thread (default DefaultLinger), and WithNextWait
// how long Run.Next waits for an undelivered follow-up.
func WithLinger(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithLinger: linger %v is not positive", ErrInvalid, d)
		}
		c.linger = d
		return nil
	}
}

// WithNextWait sets how long Run.Next waits for a follow-up that is not yet
// delivered before it reports none (default DefaultNextWait).
func WithNextWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithNextWait: next wait %v is not positive", ErrInvalid, d)
		}
		c.nextWait = d
		return nil
	}
}

// WithDedupeWindow sets how long a thread remembers the IDs of signals it ran
// (default DefaultDedupeWindow, at most DedupeEntries IDs per thread). d must
// be within [1s, MaxDedupeWindow].
func WithDedupeWindow(d time.Duration) Option {
	return func(c *config) error {
		switch {
		case d < time.Second:
			return fmt.Errorf("%w: WithDedupeWindow: dedupe window %v is below 1s", ErrInvalid, d)
		case d > MaxDedupeWindow:
			return fmt.Errorf("%w: WithDedupeWindow: dedupe window %v is above %v (MaxDedupeWindow)", ErrInvalid, d, MaxDedupeWindow)
		}
		c.dedup = d
		return nil
	}
}

// WithLogger sets the logger of warnings and agent errors (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger: logger is nil", ErrInvalid)
		}
		c.logger = l
		return nil
	}
}

// WithProcessID names this runtime in lease owners and events (default: host
// name, process id and a random suffix). Owners stay unique per tenure
// whatever the name.
func WithProcessID(id string) Option {
	return func(c *config) error {
		if id == "" {
			return fmt.Errorf("%w: WithProcessID: process id is empty", ErrInvalid)
		}
		c.process = id
		return nil
	}
}

// WithObserver sets a function called with every Event, synchronously from
// the runtime's goroutines: it must be fast and safe for concurrent use,
// and it must return. It is not recovered: a panic in it ends the process,
// as any unrecovered panic does, and a runtime.Goexit in it (t.FailNow in a
// test) ends the runtime goroutine that called it, whose work (a tenure,
// a Send) then never finishes, and Close may not return.
func WithObserver(f func(Event)) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithObserver: observer is nil", ErrInvalid)
		}
		c.observer = f
		return nil
	}
}

// WithWorkConcurrency sets how many wake notices are handled at once
// (default DefaultWorkConcurrency); n must be within [1,
// pubsub.MaxConcurrency].
func WithWorkConcurrency(n int) Option {
	return func(c *config) error {
		switch {
		case n < 1:
			return fmt.Errorf("%w: WithWorkConcurrency: work concurrency %d is below 1", ErrInvalid, n)
		case n > pubsub.MaxConcurrency:
			return fmt.Errorf("%w: WithWorkConcurrency: work concurrency %d is above %d (pubsub.MaxConcurrency)", ErrInvalid, n, pubsub.MaxConcurrency)
		}
		c.workConcurrency = n
		return nil
	}
}
