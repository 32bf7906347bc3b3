package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
)

var (
	// ErrReleased is the cause a Held ends with (Err, context.Cause of its
	// Context) after Release.
	ErrReleased = errors.New("lease: released")

	// ErrTransferred is the cause a Held ends with after a successful
	// Transfer: the lease lives on in the Held that Transfer returned.
	ErrTransferred = errors.New("lease: transferred")

	// ErrTransferUnknown is matched (errors.Is), beside ErrNotHeld, by the
	// error of a Held.Transfer whose outcome is unknown and by the cause the
	// Held then ends with: the transfer may have run, or may still run at
	// any later time (see Held.Transfer).
	ErrTransferUnknown = errors.New("lease: transfer outcome unknown")
)

const (
	// maxRenewBatch is the most renewals sent in one BatchRenewer call.
	maxRenewBatch = 1000
	// maxBatchesInFlight bounds concurrent BatchRenewer calls.
	maxBatchesInFlight = 4
	// maxRenewInFlight bounds concurrent RenewLease calls when the provider
	// has no BatchRenewer.
	maxRenewInFlight = 64
)

// KeeperOptions configures a Keeper. The zero value is valid.
type KeeperOptions struct {
	// RenewEvery is how often each Held is renewed. Default (0): a third of
	// the Held's TTL. Keep rejects (ErrInvalid) a RenewEvery below 1ms (it
	// would spin) and a ttl that is not longer than RenewEvery.
	RenewEvery time.Duration
}

// Keeper holds leases and renews them in the background, failing closed.
//
// # Loss deadline
//
// Every Held has a loss deadline of its own: the start (on the monotonic
// clock) of the last acquire or renew call that succeeded, plus the TTL
// (rounded down to whole milliseconds, as Redis counts it), minus a safety
// margin of min(TTL/10, (TTL − renew interval)/2) (at least 1ms when the
// interval leaves room), which is a tenth of the TTL with the default
// interval. The backend cannot expire the lease before start + TTL, since
// it received the call after it started, so the deadline always comes
// first, by the margin (provided the backend's clock does not jump ahead). When the deadline passes
// the Held ends with an error matching ErrNotHeld: Err and Context().Err
// report it from that instant (they check the clock themselves), and a
// timer of the Held's own closes Done and cancels Context (and the contexts
// derived from it) as soon as the runtime runs it, normally well within the
// margin; a renewal answered after the deadline never revives the Held.
// Nothing delays it: not a renewal call still in flight (a black-holed
// network, a client that ignores ctx deadlines, a provider call that never
// returns), not the renewal rounds of other Helds, not another Held's
// longer TTL. A refused renewal ends the Held at once.
//
// # Renewal
//
// One goroutine per Keeper schedules the renewals, in aligned batches: when
// the earliest Held is due, every Held due within the next half renewal
// interval is renewed with it, through [BatchRenewer] (at most 1000 per
// call, up to 4 calls at once) when the provider has it, or else with one
// RenewLease per Held, up to 64 at once. Calls run in goroutines of their
// own, so a hanging call delays nobody else's renewal; while all the slots
// are taken by hanging calls, the Helds waiting for one end at their loss
// deadlines. Each call gets a context that ends halfway between its start
// and the earliest loss deadline among its Helds, so that a Held whose call
// failed or hung still has time for a retry, and holds only Helds whose
// loss deadlines are within twice the time left to that earliest one
// (Helds with far more time left go in calls of their own, so that short
// leases a slow network cannot sustain do not cut theirs short); a Held whose renewal failed is
// retried after min(TTL/10, renew interval). When a BatchRenewer reports a
// [BatchError], only the requests it names as failed count as failed. The
// scheduling goroutine runs only while the Keeper holds at least one Held:
// it exits when the last one ends and starts again on the next Keep.
//
// A Keeper is safe for concurrent use. Create it with NewKeeper; the package
// function [Keep] uses a Keeper shared per Provider instead.
type Keeper struct {
	p      Provider
	batch  BatchRenewer // nil when p has no batch renewal
	every  time.Duration
	shared bool // the Keeper Keep shares for p; removed from sharedKeepers when idle

	stopCtx context.Context // cancelled by Close: aborts renew calls in flight
	stop    context.CancelFunc

	wake  chan struct{}  // buffered 1: asks the loop to plan again
	calls sync.WaitGroup // renew calls in flight

	mu       sync.Mutex
	helds    map[*Held]struct{}
	closed   bool
	running  bool          // a loop goroutine is running
	loopDone chan struct{} // closed when the latest loop goroutine exits
	inFlight int           // renew calls in flight
	nextWake time.Time     // when the idle loop will look again; zero while planning
}

// NewKeeper returns a Keeper that keeps leases of p. It starts no goroutine
// until the first Keep.
func NewKeeper(p Provider, opts KeeperOptions) *Keeper {
	return newKeeper(p, opts, false)
}

func newKeeper(p Provider, opts KeeperOptions, shared bool) *Keeper {
	k := &Keeper{
		p:      p,
		every:  opts.RenewEvery,
		shared: shared,
		wake:   make(chan struct{}, 1),
		helds:  make(map[*Held]struct{}),
	}
	k.batch, _ = p.(BatchRenewer)
	k.stopCtx, k.stop = context.WithCancel(context.Background())
	return k
}

// sharedKeepers maps a Provider to the Keeper that the package function Keep
// uses for it. A Keeper removes itself when it holds nothing.
var sharedKeepers sync.Map

// Keep acquires key for owner for ttl with one AcquireLease on p and keeps
// it renewed by a Keeper shared by every Keep of p, as [Keeper.Keep] does.
// The shared Keeper's goroutine exits when it holds no lease, so nothing
// needs to be closed; release each Held when done.
func Keep(ctx context.Context, p Provider, key, owner string, ttl time.Duration) (*Held, error) {
	if err := checkProvider(p); err != nil {
		return nil, err
	}
	k := sharedKeeper(p)
	h, err := k.Keep(ctx, key, owner, ttl)
	if err != nil {
		k.dropIfIdle()
	}
	return h, err
}

// dropIfIdle forgets a shared Keeper that holds nothing, so that sharedKeepers
// does not keep providers alive.
func (k *Keeper) dropIfIdle() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shared && !k.running && len(k.helds) == 0 {
		sharedKeepers.CompareAndDelete(k.p, k)
	}
}

func sharedKeeper(p Provider) *Keeper {
	if !reflect.ValueOf(p).Comparable() {
		// Cannot be a map key: a Keeper of its own, whose goroutine
		// still exits when its last Held ends.
		return newKeeper(p, KeeperOptions{}, false)
	}
	if v, ok := sharedKeepers.Load(p); ok {
		return v.(*Keeper)
	}
	v, _ := sharedKeepers.LoadOrStore(p, newKeeper(p, KeeperOptions{}, true))
	return v.(*Keeper)
}

// Keep acquires key for owner for ttl with one AcquireLease and, when that
// wins, returns a Held that the Keeper renews until it is released,
// transferred or lost, or the Keeper closes. ctx bounds only the acquire; the
// Held's own lifetime is its Context, which carries ctx's values but not its
// cancellation. The Held's first loss deadline (see [Keeper]) counts from
// the start of the acquire.
//
// When another owner holds key, Keep returns a *HeldError (errors.Is
// ErrHeld). It returns an error wrapping ErrInvalid for bad input (also when
// ttl is not longer than KeeperOptions.RenewEvery), ErrClosed after Close,
// the provider's error (wrapped) when the acquire failed, and an error
// wrapping ErrNotHeld when the acquire won but took so long that the loss
// deadline had passed when it returned (the lease is then released). Keeping
// a key the same owner already holds re-acquires it (same token): owners
// should be unique per holder.
func (k *Keeper) Keep(ctx context.Context, key, owner string, ttl time.Duration) (*Held, error) {
	if err := checkProvider(k.p); err != nil {
		return nil, fmt.Errorf("%w (NewKeeper)", err)
	}
	if err := CheckAcquire(key, owner, ttl); err != nil {
		return nil, err
	}
	interval, err := k.interval(ttl)
	if err != nil {
		return nil, fmt.Errorf("%w (key %q)", err, key)
	}
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	sent := time.Now()
	r, err := k.p.AcquireLease(ctx, key, owner, ttl)
	if err != nil {
		return nil, fmt.Errorf("lease: acquire %q for %s: %w", key, owner, err)
	}
	if !r.Acquired {
		return nil, NewHeldError(key, r)
	}
	return k.start(ctx, key, owner, r.Token, ttl, interval, sent)
}

// start keeps the lease just acquired (or transferred) for owner by a call
// started at sent, or releases it when the Held could not be kept: the
// Keeper closed meanwhile, or the loss deadline already passed.
func (k *Keeper) start(ctx context.Context, key, owner string, token uint64, ttl, interval time.Duration, sent time.Time) (*Held, error) {
	h := k.newHeld(ctx, key, owner, token, ttl, interval, sent)
	if err := k.add(h); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		_ = k.p.ReleaseLease(rctx, key, owner)
		cancel()
		h.cancel(err)
		return nil, err
	}
	return h, nil
}

func (k *Keeper) interval(ttl time.Duration) (time.Duration, error) {
	switch {
	case k.every < 0:
		return 0, fmt.Errorf("%w: RenewEvery %v is negative", ErrInvalid, k.every)
	case k.every > 0 && k.every < time.Millisecond:
		return 0, fmt.Errorf("%w: RenewEvery %v is below 1ms", ErrInvalid, k.every)
	case k.every == 0:
		if ttl/3 < time.Millisecond {
			return 0, fmt.Errorf("%w: ttl %v is too short to renew every ttl/3 (below 1ms)", ErrInvalid, ttl)
		}
		return ttl / 3, nil
	case k.every >= ttl:
		return 0, fmt.Errorf("%w: ttl %v is not longer than RenewEvery %v", ErrInvalid, ttl, k.every)
	}
	return k.every, nil
}

// Close stops renewing: every Held of the Keeper ends (Done closes, Err and
// the cause of Context are ErrClosed), and later Keep calls return
// ErrClosed. It does not release the leases: they stay with their owners
// until they expire on the backend, unless each Held's Release is called. It
// cancels the renew calls in flight and waits for them and for the Keeper's
// goroutine to return (a provider call that ignores its ctx is waited for
// too). It is idempotent, safe to call concurrently, and returns nil.
func (k *Keeper) Close() error {
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		for h := range k.helds {
			k.endLocked(h, ErrClosed, false)
		}
		k.stop()
	}
	done := k.loopDone
	k.mu.Unlock()
	if done != nil {
		<-done
	}
	k.calls.Wait()
	return nil
}

// add registers h, arms its loss timer and makes sure the loop will renew
// it in time. It fails when the Keeper is closed or h's loss deadline has
// passed already.
func (k *Keeper) add(h *Held) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	left := time.Until(h.loseAt)
	if left <= 0 {
		return fmt.Errorf("%w: lease %q of %s: the acquire took longer than the lease allows", ErrNotHeld, h.key, h.owner)
	}
	k.helds[h] = struct{}{}
	h.timer = time.AfterFunc(left, func() { k.expire(h) })
	if !k.running {
		if k.shared {
			// Its loop may have just dropped it from sharedKeepers: put it
			// back, so that later Keeps of p batch with this one.
			sharedKeepers.LoadOrStore(k.p, k)
		}
		k.running = true
		prev := k.loopDone
		k.loopDone = make(chan struct{})
		go k.loop(prev, k.loopDone)
	} else if !k.nextWake.IsZero() && h.next.Before(k.nextWake) {
		k.signal()
	}
	return nil
}

func (k *Keeper) signal() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// expire ends h when its loss deadline has passed; h's timer calls it.
func (k *Keeper) expire(h *Held) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expireLocked(h, time.Now())
}

// expireLocked ends h if its loss deadline is not after now. k.mu is held.
func (k *Keeper) expireLocked(h *Held, now time.Time) {
	if h.state != heldEnded && !now.Before(h.loseAt) {
		k.endLocked(h, h.lossErr(), false)
	}
}

// endLocked ends h with cause unless it has ended already. noRelease marks a
// Held whose owner is known not to hold the lease any more, so that Release
// makes no round trip. k.mu is held.
func (k *Keeper) endLocked(h *Held, cause error, noRelease bool) {
	if h.state == heldEnded {
		return
	}
	h.state = heldEnded
	h.noRelease = noRelease
	if h.timer != nil {
		h.timer.Stop()
	}
	delete(k.helds, h)
	h.cancel(cause)
	if len(k.helds) == 0 {
		k.signal() // let the loop exit now rather than at its next timer
	}
}

// loop is the Keeper's goroutine: it sleeps until the earliest Held is due,
// starts the renew calls of the Helds that are due, and exits when the
// Keeper holds nothing or is closed. It never waits for a renew call.
func (k *Keeper) loop(prev, done chan struct{}) {
	defer close(done)
	if prev != nil {
		<-prev // the previous loop is returning; never two at once
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		due, wait, ok := k.plan()
		if !ok {
			return
		}
		if len(due) > 0 {
			k.renew(due)
			continue
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-k.wake:
		case <-k.stopCtx.Done():
		}
		timer.Stop()
	}
}

// plan ends the Helds whose loss deadline has passed (their timers do too;
// this is a backstop) and returns either the Helds to renew now, as many as
// free call slots allow, or how long to wait (0: until woken, when every
// slot is taken). It reports false, marking the loop stopped, when there is
// nothing left to keep.
func (k *Keeper) plan() (due []*Held, wait time.Duration, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	var nextDue time.Time
	for h := range k.helds {
		k.expireLocked(h, now)
		if h.state == heldActive && !h.renewing && (nextDue.IsZero() || h.next.Before(nextDue)) {
			nextDue = h.next
		}
	}
	if k.closed || len(k.helds) == 0 {
		k.running = false
		k.nextWake = time.Time{}
		if k.shared {
			sharedKeepers.CompareAndDelete(k.p, k)
		}
		return nil, 0, false
	}
	if nextDue.IsZero() {
		k.nextWake = now.Add(time.Hour) // woken by add, a finished call or an end
		return nil, time.Hour, true
	}
	if nextDue.After(now) {
		k.nextWake = nextDue
		return nil, nextDue.Sub(now), true
	}
	room := k.room()
	if room == 0 {
		k.nextWake = time.Time{}
		return nil, 0, true // a finishing call wakes the loop
	}
	for h := range k.helds {
		// Align: renew now what would be due within half an interval.
		if h.state == heldActive && !h.renewing && !h.next.After(now.Add(h.interval/2)) {
			due = append(due, h)
			if len(due) == room {
				break
			}
		}
	}
	slices.SortFunc(due, func(a, b *Held) int { return a.loseAt.Compare(b.loseAt) })
	for _, h := range due {
		h.renewing = true
	}
	k.nextWake = time.Time{}
	return due, 0, true
}

// room returns how many Helds the free call slots can renew. k.mu is held.
func (k *Keeper) room() int {
	if k.batch != nil {
		return (maxBatchesInFlight - k.inFlight) * maxRenewBatch
	}
	return maxRenewInFlight - k.inFlight
}

// renew starts the calls that renew due (sorted by loss deadline, so that
// Helds of similar deadlines share a call), each in a goroutine of its own.
// A batch call holds only Helds whose loss deadlines are within twice the
// time left to its first's: its ctx ends halfway to that first deadline,
// and a Held with far more time left must not have its renewal cut that
// short (a Held of 3s renewed in the calls of 30ms Helds that the network
// cannot sustain failed every time, and was lost:
// TestReviewH70ShortHeldStarvesLongOnes). Helds for which no call slot is
// left then wait for the next plan (a finishing call wakes the loop).
func (k *Keeper) renew(due []*Held) {
	size := 1
	if k.batch != nil {
		size = maxRenewBatch
	}
	k.mu.Lock()
	now := time.Now()
	var chunks [][]*Held
	for i := 0; i < len(due); {
		j := i + 1
		limit := 2 * max(due[i].loseAt.Sub(now), time.Millisecond)
		for j < len(due) && j-i < size && due[j].loseAt.Sub(now) <= limit {
			j++
		}
		chunks = append(chunks, due[i:j])
		i = j
	}
	slots := maxRenewInFlight - k.inFlight
	if k.batch != nil {
		slots = maxBatchesInFlight - k.inFlight
	}
	if len(chunks) > slots {
		for _, chunk := range chunks[max(slots, 0):] {
			for _, h := range chunk {
				h.renewing = false
			}
		}
		chunks = chunks[:max(slots, 0)]
	}
	k.inFlight += len(chunks)
	k.mu.Unlock()
	for _, chunk := range chunks {
		k.calls.Go(func() {
			defer k.callDone()
			if k.batch != nil {
				k.renewBatch(chunk)
			} else {
				k.renewOne(chunk[0])
			}
		})
	}
}

func (k *Keeper) callDone() {
	k.mu.Lock()
	k.inFlight--
	k.mu.Unlock()
	k.signal()
}

// callContext returns the context of a renew call of hs starting at sent:
// it ends halfway between sent and the earliest loss deadline among hs
// (Helds in the call that fail can then still be retried in time), or when
// the Keeper closes.
func (k *Keeper) callContext(hs []*Held, sent time.Time) (context.Context, context.CancelFunc) {
	k.mu.Lock()
	first := hs[0].loseAt
	for _, h := range hs {
		if h.loseAt.Before(first) {
			first = h.loseAt
		}
	}
	k.mu.Unlock()
	ctx, cancel := context.WithDeadline(k.stopCtx, sent.Add(first.Sub(sent)/2))
	return ctx, cancel
}

// renewOne renews h with one RenewLease.
func (k *Keeper) renewOne(h *Held) {
	sent := time.Now()
	ctx, cancel := k.callContext([]*Held{h}, sent)
	defer cancel()
	ok, err := k.p.RenewLease(ctx, h.key, h.owner, h.ttl)
	k.mu.Lock()
	k.applyLocked(h, sent, ok, err)
	k.mu.Unlock()
}

// renewBatch renews chunk with one BatchRenewer call and applies the
// outcome to each of its Helds: an error counts as a failed renewal of
// every one, except a *BatchError with a full-length result, which fails
// only the requests it names; a result of the wrong length fails all.
func (k *Keeper) renewBatch(chunk []*Held) {
	reqs := make([]Renewal, len(chunk))
	for i, h := range chunk {
		reqs[i] = Renewal{Key: h.key, Owner: h.owner, TTL: h.ttl}
	}
	sent := time.Now()
	ctx, cancel := k.callContext(chunk, sent)
	defer cancel()
	oks, err := k.batch.RenewLeases(ctx, reqs)
	var each []error
	if be, isBatch := errors.AsType[*BatchError](err); isBatch {
		if len(be.Errs) == len(reqs) && len(oks) == len(reqs) {
			each, err = be.Errs, nil
		} else {
			// Malformed: no result is known, and no single entry (a
			// revoke, say) may end every Held of the chunk.
			err = fmt.Errorf("lease: RenewLeases returned %d results and %d errors for %d requests: %v", len(oks), len(be.Errs), len(reqs), err)
		}
	}
	if err == nil && len(oks) != len(reqs) {
		err = fmt.Errorf("lease: RenewLeases returned %d results for %d requests", len(oks), len(reqs))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, h := range chunk {
		ok, herr := false, err
		if herr == nil && each != nil {
			herr = each[i]
		}
		if herr == nil {
			ok = oks[i]
		}
		k.applyLocked(h, sent, ok, herr)
	}
}

// applyLocked records the outcome of renewing h with a call started at
// sent. k.mu is held. A Held whose loss deadline has passed has ended,
// whatever the outcome.
func (k *Keeper) applyLocked(h *Held, sent time.Time, ok bool, err error) {
	h.renewing = false
	k.expireLocked(h, time.Now())
	if h.state != heldActive {
		return // released, transferring or ended meanwhile
	}
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalid), errors.Is(err, ErrRevoked):
		k.endLocked(h, fmt.Errorf("%w: lease %q of %s: renew: %w", ErrNotHeld, h.key, h.owner, err), false)
	case err != nil:
		h.lastErr = err
		h.next = time.Now().Add(h.retry)
	case !ok:
		k.endLocked(h, fmt.Errorf("%w: lease %q of %s: renewal refused (expired or taken)", ErrNotHeld, h.key, h.owner), true)
	default:
		h.lastErr = nil
		h.next = sent.Add(h.interval)
		if loseAt := sent.Add(h.life); loseAt.After(h.loseAt) {
			h.loseAt = loseAt
			h.timer.Reset(time.Until(loseAt))
		}
	}
}

type heldState int

const (
	heldActive       heldState = iota
	heldTransferring           // Transfer in flight: not renewed, still timed
	heldEnded
)

// Held is a lease kept by a Keeper. Its accessors are safe for concurrent
// use. It ends exactly once, for one of these causes, which Err returns and
// which is the context.Cause of Context:
//
//   - ErrReleased after Release;
//   - ErrTransferred after a successful Transfer;
//   - ErrClosed after the Keeper's Close;
//   - an error matching ErrNotHeld when the lease was lost: a renewal was
//     refused (also matching ErrRevoked when the lease was revoked), or its
//     loss deadline passed (see [Keeper]) while renewals failed or hung
//     (then it also wraps the last renew error, if one returned), or a
//     Transfer's outcome is unknown (also matching ErrTransferUnknown).
type Held struct {
	k                         *Keeper
	key, owner                string
	token                     uint64
	ttl, interval             time.Duration
	life, retry               time.Duration   // life: TTL (in whole ms) − margin
	ctx                       context.Context // cancelled with the cause when the Held ends
	hctx                      heldContext     // what Context returns
	cancel                    context.CancelCauseFunc
	state                     heldState // guarded by k.mu, like the fields below
	renewing                  bool      // a renew call for it is in flight
	next, loseAt              time.Time
	timer                     *time.Timer // fires expire at loseAt
	lastErr                   error
	noRelease, releaseStarted bool
}

func (k *Keeper) newHeld(ctx context.Context, key, owner string, token uint64, ttl, interval time.Duration, sent time.Time) *Held {
	// Lost a margin before the backend could expire the lease; the margin
	// leaves room for the last renewal and never reaches back before the
	// next renewal is due.
	// The TTL counts in whole milliseconds, as backends on Redis round it
	// down; the margin is at least 1ms when the interval leaves room.
	margin := max(min(ttl/10, (ttl-interval)/2), min(time.Millisecond, (ttl-interval)/2))
	life := ttl.Truncate(time.Millisecond) - margin
	h := &Held{
		k: k, key: key, owner: owner, token: token,
		ttl: ttl, interval: interval, life: life,
		retry:  max(min(ttl/10, interval), time.Millisecond/10),
		next:   sent.Add(interval),
		loseAt: sent.Add(life),
	}
	h.ctx, h.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	h.hctx = heldContext{Context: h.ctx, h: h}
	return h
}

func (h *Held) lossErr() error {
	if h.lastErr != nil {
		return fmt.Errorf("%w: lease %q of %s: loss deadline passed, renewals failing: %w", ErrNotHeld, h.key, h.owner, h.lastErr)
	}
	return fmt.Errorf("%w: lease %q of %s: loss deadline passed, no renewal completed in time", ErrNotHeld, h.key, h.owner)
}

// checkDeadline ends h if its loss deadline has passed, so that no accessor
// reports it live past the deadline even before its timer has run.
func (h *Held) checkDeadline() {
	if h.ctx.Err() != nil {
		return
	}
	h.k.mu.Lock()
	h.k.expireLocked(h, time.Now())
	h.k.mu.Unlock()
}

// heldContext is the Held's Context: its Err checks the loss deadline
// itself rather than trust that the Held's timer has run.
type heldContext struct {
	context.Context
	h *Held
}

func (c heldContext) Err() error {
	c.h.checkDeadline()
	return c.Context.Err()
}

// Key returns the lease key.
func (h *Held) Key() string { return h.key }

// Owner returns the owner the lease is held for.
func (h *Held) Owner() string { return h.owner }

// Token returns the fencing token of this tenure. Pass it to the resource
// the lease protects.
func (h *Held) Token() uint64 { return h.token }

// TTL returns the ttl the lease is renewed with.
func (h *Held) TTL() time.Duration { return h.ttl }

// Deadline returns the Held's current loss deadline (see [Keeper]): the
// moment it ends unless a renewal succeeds first. A renewal moves it later;
// nothing moves it earlier. Bound a write that must happen while the lease
// is held with it (context.WithDeadline), so that a client that honours ctx
// deadlines gives up in time.
func (h *Held) Deadline() time.Time {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	return h.loseAt
}

// Done returns a channel that is closed when the Held ends: released,
// transferred, lost, or its Keeper closed. When it closes because renewals
// failed, it does so at the loss deadline (by the Held's own timer, so
// after it by the runtime's timer latency, normally far less than the
// margin), before the lease could expire on the backend, so work guarded by
// it stops before another owner can take over. Err checks the clock itself
// and is non-nil from the deadline's first instant.
func (h *Held) Done() <-chan struct{} { return h.ctx.Done() }

// Context returns a context that is cancelled when the Held ends, with the
// reason as its context.Cause. It carries the values of Keep's ctx, not its
// cancellation. Its Err is non-nil from the loss deadline on. Run the work
// the lease guards under it.
func (h *Held) Context() context.Context { return h.hctx }

// Err returns nil while the lease is held and, once it ended, why (see
// [Held]). It is non-nil from the loss deadline on, even if Done has not
// closed yet.
func (h *Held) Err() error {
	h.checkDeadline()
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

// Release stops renewing, ends the Held (Err is then ErrReleased, unless it
// had ended before) and deletes the lease with ReleaseLease. It makes no
// round trip when the lease is known to be gone: after a refused renewal or
// a Transfer that ran or was refused. After a loss by failing renewals, a
// Transfer of unknown outcome (ErrTransferUnknown: release it, or the key
// stays with this owner until it expires unless the transfer runs) or the
// Keeper's Close it still releases the lease, which is deleted only if the
// owner holds it: a new
// holder is never clobbered, but another Held of the same owner would be.
// On a provider that implements [TokenReleaser] it releases only this
// Held's tenure, so that a release that failed and still runs later (a
// request the network delivers late) leaves a later tenure of the same owner
// alone (TestReviewH70LateReleaseEndsLaterTenure); on another provider such
// a release deletes whatever lease the owner holds by then.
// Release is idempotent: once a ReleaseLease succeeded, later calls return
// nil; after a failed one (the error is returned), a later call tries again.
func (h *Held) Release(ctx context.Context) error {
	k := h.k
	k.mu.Lock()
	if h.releaseStarted || h.noRelease {
		k.mu.Unlock()
		return nil
	}
	h.releaseStarted = true
	k.endLocked(h, ErrReleased, false)
	k.mu.Unlock()
	var err error
	if tr, ok := k.p.(TokenReleaser); ok && h.token > 0 {
		err = tr.ReleaseLeaseToken(ctx, h.key, h.owner, h.token)
	} else {
		err = k.p.ReleaseLease(ctx, h.key, h.owner)
	}
	if err != nil {
		k.mu.Lock()
		h.releaseStarted = false
		k.mu.Unlock()
		return fmt.Errorf("lease: release %q for %s: %w", h.key, h.owner, err)
	}
	return nil
}

// Transfer hands the lease to owner to with TransferLease (one atomic step,
// never free in between, a new token and a full TTL) and returns a new Held
// for to, kept by the same Keeper. Its token is the one the transfer
// reports on a provider that implements [TokenTransferer]; on another it is
// read with one more AcquireLease by to, which re-acquires the same tenure.
// On success this Held ends with ErrTransferred.
//
// It returns an error wrapping ErrNotHeld, and this Held ends, when the
// transfer was refused because the lease was lost or revoked (then it also
// matches ErrRevoked); an error wrapping
// ErrNotHeld and the cause when this Held had already ended; ErrInvalid for
// bad input (to empty or equal to Owner). When the call was surely not sent
// (its error matches ErrNotSent) or the provider refused it as closed
// (ErrClosed), this Held goes on being kept.
//
// Any other error leaves the transfer's outcome unknown, and then this Held
// ends at once (failing closed), with an error wrapping ErrNotHeld,
// ErrTransferUnknown and the cause, which Transfer returns: a transfer sent to a server that did not
// answer may run there at any later time (a request the network delivers
// after a partition heals, past every retry and renewal), handing the key to
// to, so no later renewal can prove that this Held still holds it
// (TestReviewH70LateTransferAfterRenewal: before, the Held was renewed at
// once, the renewal succeeded, and the late transfer then gave the key to to
// while the Held reported it live for up to its loss deadline). The key is
// then held by this Held's owner, until it expires or Release deletes it
// (with this Held's token, on a [TokenReleaser]: a transfer that runs after
// the release is refused), or by to, who learns it with AcquireLease (which
// a lease to holds grants) or lease.Wait. When the transfer succeeded but
// reading the new token failed, the error is returned and the lease stays
// with to until it expires.
func (h *Held) Transfer(ctx context.Context, to string) (*Held, error) {
	if err := CheckTransfer(h.key, h.owner, to, h.ttl); err != nil {
		return nil, err
	}
	k := h.k
	k.mu.Lock()
	if h.state != heldActive {
		k.mu.Unlock()
		if err := h.Err(); err != nil {
			return nil, fmt.Errorf("%w: lease %q of %s: %w", ErrNotHeld, h.key, h.owner, err)
		}
		return nil, fmt.Errorf("%w: lease %q of %s: a transfer is in flight", ErrNotHeld, h.key, h.owner)
	}
	h.state = heldTransferring
	k.mu.Unlock()

	// Before the call: the new tenure's TTL runs from some time after it.
	sent := time.Now()
	var (
		tok uint64 // the new owner's token, when the provider tells it
		ok  bool
		err error
	)
	if tt, isTT := k.p.(TokenTransferer); isTT {
		tok, err = tt.TransferLeaseToken(ctx, h.key, h.owner, to, h.ttl)
		ok = tok > 0
	} else {
		ok, err = k.p.TransferLease(ctx, h.key, h.owner, to, h.ttl)
	}
	k.mu.Lock()
	switch {
	case errors.Is(err, ErrRevoked):
		err = fmt.Errorf("%w: lease %q of %s: transfer to %s: %w", ErrNotHeld, h.key, h.owner, to, err)
		k.endLocked(h, err, false)
		k.mu.Unlock()
		return nil, err
	case err != nil && !transferSurelyNotRun(err):
		// The outcome is unknown, and stays so: the transfer may still run
		// (see the doc comment). Fail closed.
		err = fmt.Errorf("%w: lease %q of %s: %w: transfer to %s may have run or may still run: %w", ErrNotHeld, h.key, h.owner, ErrTransferUnknown, to, err)
		k.endLocked(h, err, false)
		k.mu.Unlock()
		return nil, err
	case err != nil:
		if h.state == heldTransferring {
			h.state = heldActive
			k.signal() // a renewal may have come due while it was in flight
		}
		k.mu.Unlock()
		return nil, fmt.Errorf("lease: transfer %q from %s to %s: %w", h.key, h.owner, to, err)
	case !ok:
		err = fmt.Errorf("%w: lease %q: transfer from %s to %s refused, %s no longer holds it", ErrNotHeld, h.key, h.owner, to, h.owner)
		k.endLocked(h, err, true)
		k.mu.Unlock()
		return nil, err
	}
	k.endLocked(h, ErrTransferred, true)
	k.mu.Unlock()

	if tok > 0 {
		return k.start(ctx, h.key, to, tok, h.ttl, h.interval, sent)
	}
	sent = time.Now()
	r, err := k.p.AcquireLease(ctx, h.key, to, h.ttl)
	if err != nil {
		return nil, fmt.Errorf("lease: %q transferred to %s, but reading its token failed (it stays with %s until it expires): %w", h.key, to, to, err)
	}
	if !r.Acquired {
		return nil, fmt.Errorf("%w: lease %q lost right after its transfer to %s: %w", ErrNotHeld, h.key, to, NewHeldError(h.key, r))
	}
	return k.start(ctx, h.key, to, r.Token, h.ttl, h.interval, sent)
}

// transferSurelyNotRun reports whether a transfer that failed with err
// surely did not run and never will: a call never sent (ErrNotSent) or
// refused by a closed provider (ErrClosed).
func transferSurelyNotRun(err error) bool {
	return errors.Is(err, ErrNotSent) || errors.Is(err, ErrClosed)
}
