package redisstreams

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/ackhook"
	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/pubsub"
)

// groupSub is one consumer of a Redis consumer group.
type groupSub struct {
	s        *streamBus
	topic    string
	key      string
	group    string
	consumer string
	p        *pubsub.Policy
	cfg      pubsub.SubscribeConfig

	// tokens bounds the entries read and not yet finished (queued or
	// running): one token per entry.
	tokens chan struct{}
	ch     chan *groupMsg

	mu       sync.Mutex
	inflight map[string]*groupMsg // by entry id: queued or running here

	// claimed is closed when the ClaimPending take-over is over (at once
	// without ClaimPending); reclaimLoop starts after it, so that it cannot
	// take a later pending entry before an earlier one.
	claimed chan struct{}

	// kick holds a pending Kick of a ReadOnDemand subscription; kicked
	// says a Kick came since the last reclaim pass (a ReadOnDemand
	// subscription looks for stale entries only while it is being told
	// about new ones).
	kick   chan struct{}
	kicked atomic.Bool

	// bellOn is the shared reader holding this subscription's bell (nil:
	// none yet, or ReadOnDemand); bellCursor is the last entry id it has
	// seen, guarded by bellOn.mu.
	bellOn     *fanReader
	bellCursor string

	// guard is the consumer's read guard key (read.lua) and readSeq the
	// sequence number of its latest read (readLoop's): a read runs on the
	// server only if no later one ran and the subscription has not ended.
	guard   string
	readSeq uint64
	// readBiggest is the size of the biggest entry the latest read that
	// returned entries had (readBytes): the next read's first chunk
	// (read.lua) takes as many as fit in readBudget. readLoop's own.
	readBiggest int
	// lateRisk says a command that sets the guard may still reach the
	// server late (the guard had to be set again): then cleanup leaves a
	// tombstone in the guard instead of deleting it, so that the late copy
	// cannot create it again and let a late read run. (A late read alone
	// needs no tombstone: without its guard it is refused.)
	lateRisk atomic.Bool

	// maxSeen (guarded by mu) is the highest entry id this subscription
	// received, by a read or a claim. suspect says a read failed in a way
	// that may have run it on the server all the same (a timeout, a cut
	// connection): until a check that follows a read that ran (in the same
	// pipeline) finds nothing, each read is followed by a listing of what
	// is pending here above lostFrom (maxSeen at the first failure), and
	// takes, in order, what it did not see (recoverLost); seenSince
	// (guarded by mu) holds the ids received meanwhile. The rest belongs to
	// readLoop.
	maxSeen   string
	suspect   bool
	lostFrom  string
	seenSince map[string]bool
	// claiming (guarded by mu) holds the ids a claim or a lost-read
	// recovery is fetching, until they are queued (in inflight): neither
	// takes an id the other is taking.
	claiming map[string]bool
	// undos counts the claims of this member that undoClaim put back
	// (claimQueue), each counted before its ids' reservations end: a
	// lost-read check sent before an undo may list an entry that the undo
	// has since put back on another consumer (recoverLost).
	undos atomic.Uint64

	// due holds nacked entries whose redelivery delay has passed, for
	// retryLoop; dueCh wakes it. Waiting entries hold no handler and no
	// token, so a nacked entry never stops the others.
	due   []*groupMsg
	dueCh chan struct{}

	// nudge makes reclaimLoop run a pass now: another member of the group
	// handed entries back (handBackNotice). mark is the group's hand-back
	// notice key; markSeen (the read loop's) is the notice it last saw, and
	// markAt when it last looked (readLoop looks at most once a BlockTime,
	// in a read's pipeline).
	nudge    chan struct{}
	mark     string
	markSeen string
	markAt   time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
	err    error
	// byClose: the Backend's Close stopped the subscription first. Set in
	// once, read after done.
	byClose bool
}

// groupMsg is one entry owned by this consumer. Its fields other than id
// are guarded by groupSub.mu.
type groupMsg struct {
	id         string
	values     map[string]any
	attempt    int       // delivery count on the server after our claim
	received   time.Time // when our claim (read or XCLAIM) was answered
	started    bool      // a handler has begun it
	startAt    time.Time // when a handler began it (last attempt here)
	lost       bool      // another consumer took it over before we started it, or we handed it back (handedBack)
	handedBack bool      // lost because handBackQueued handed it back (stuck handlers)
	waiting    bool      // nacked: pending here until its redelivery delay passed (or the subscription stopped: cleanup hands it back)
	resting    bool      // nacked on a Concurrency(1) handler, waiting out its delay (retryInPlace)
	timer      *time.Timer
}

// subscribeGroup starts one consumer of the group cfg.Group on topic. With
// pubsub.ClaimPending it first takes over every entry pending on the group's
// other consumers (XPENDING from the start of the pending list, XCLAIM at
// min-idle 0, batch after batch, in id order), hands those to its handlers as
// redeliveries before it reads anything new with ">", and reads no further
// ahead than its Concurrency.
func (s *streamBus) subscribeGroup(ctx context.Context, p *pubsub.Policy, cfg pubsub.SubscribeConfig) (pubsub.Subscription, error) {
	topic := p.Topic()
	key := s.b.keys.Stream(topic)
	start := "$"
	if cfg.StartFrom == pubsub.Earliest {
		start = "0"
	}
	consumer := s.b.consumer + "-" + strconv.FormatUint(s.b.subSeq.Add(1), 10)
	guard := s.b.keys.StreamMeta(topic, "rguard:"+consumer)
	if err := s.setupGroup(ctx, key, cfg.Group, start, guard, cfg.ExpireWhenDrained); err != nil {
		return nil, err
	}
	// A member reads up to BatchSize entries ahead of its handlers, so that
	// reads are batched. A ClaimPending member does not: it is meant to be
	// its group's sole (fenced) consumer, and whatever it had read ahead and
	// not yet run when it dies would be taken over by its successor counted
	// as a redelivery (DeliveryAttempt 2) although nobody ever ran it, and
	// would be handed a predecessor's queue larger than its own handlers.
	prefetch := cfg.Concurrency + s.b.opts.BatchSize
	if cfg.ClaimPending {
		prefetch = cfg.Concurrency
	}
	g := &groupSub{
		s:        s,
		topic:    topic,
		key:      key,
		group:    cfg.Group,
		consumer: consumer,
		guard:    guard,
		p:        p,
		cfg:      cfg,
		tokens:   make(chan struct{}, prefetch),
		ch:       make(chan *groupMsg, prefetch),
		inflight: make(map[string]*groupMsg),
		claimed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
		dueCh:    make(chan struct{}, 1),
		nudge:    make(chan struct{}, 1),
		mark:     handBackMark(s.b, topic, cfg.Group),
		done:     make(chan struct{}),
	}
	if !cfg.ClaimPending {
		close(g.claimed)
	}
	for range prefetch {
		g.tokens <- struct{}{}
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	readerDone := make(chan struct{})
	g.wg.Add(3 + cfg.Concurrency)
	go func() {
		defer g.wg.Done()
		defer close(readerDone)
		g.readLoop()
	}()
	go func() {
		defer g.wg.Done()
		g.reclaimLoop()
	}()
	go func() {
		defer g.wg.Done()
		g.retryLoop()
	}()
	for range cfg.Concurrency {
		go func() {
			defer g.wg.Done()
			g.work()
		}()
	}
	s.add(g)
	return g, nil
}

// setupGroup runs createGroupAndGuard for Subscribe, and returns when ctx
// ends, also while the round trip waits for a server that stopped answering
// (go-redis ends a blocked read at ctx's deadline only with
// ContextTimeoutEnabled, and never when ctx is cancelled): the round trip
// then goes on in a goroutine of its own until the client answers or gives
// up. What it may still create is harmless: the group and its stream (the
// stream's owner deletes or trims it as before) and a read guard that
// expires after readGuardTTL.
func (s *streamBus) setupGroup(ctx context.Context, key, group, start, guard string, expire time.Duration) error {
	if ctx.Done() == nil {
		return s.createGroupAndGuard(ctx, key, group, start, guard, expire)
	}
	var err error
	done := make(chan struct{})
	if s.b.awaitSend(ctx, done, func() {
		err = s.createGroupAndGuard(ctx, key, group, start, guard, expire)
		close(done)
	}) {
		return endedWith(ctx, err)
	}
	return fmt.Errorf("redisstreams: subscribe to group %q of %q: %w (the group may have been created)", group, key, ctx.Err())
}

// readGuardTTL is how long a read guard (read.lua) outlives the latest read
// of its consumer: a subscription that ended without deleting it (its
// process died, or the server did not answer its cleanup) leaves it that
// long. A live subscription idle for longer creates it again (readLoop).
const readGuardTTL = 10 * time.Minute

// createGroupAndGuard creates the group at start with MKSTREAM (an existing
// group keeps its position) and a new consumer's read guard (read.lua), in
// one round trip. go-redis never retries it (it carries a command go-redis
// must not retry): when it fails, Subscribe fails, and a copy the network
// delivers late creates, at most, the guard of a consumer that never reads
// (it expires after readGuardTTL). The guard is set only if missing.
func (s *streamBus) createGroupAndGuard(ctx context.Context, key, group, start, guard string, expire time.Duration) error {
	pipe := s.b.client.Pipeline()
	noRetry(ctx, pipe, key)
	create := s.createGroupCmd(ctx, pipe, key, group, start, expire)
	set := pipe.SetArgs(ctx, guard, 0, redis.SetArgs{Mode: "NX", TTL: readGuardTTL})
	cmds, _ := pipe.Exec(ctx)
	s.b.reloadOnFailure(ctx, cmds...)
	if err := create.Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("redisstreams: xgroup create %q %q: %w", key, group, err)
	}
	if err := set.Err(); err != nil {
		return fmt.Errorf("redisstreams: create the read guard of %q: %w", key, err)
	}
	return nil
}

var (
	//go:embed lua/create_group.lua
	createGroupLua string
	// Sent in full (EVAL): without its comments.
	createGroupScript = redis.NewScript(luaCode(createGroupLua))
)

// createGroupCmd sends create_group.lua on c: XGROUP CREATE key group start
// MKSTREAM and, when it created the group on a stream with an expiry that
// may be a drained one (one a pubsub.ExpireWhenDrained subscription's ack
// set when its group drained the stream: the stream had that one group,
// with nothing pending; another expiry, such as a publisher's
// StreamIdleTTL, is left alone: TestStreamIdleTTLKeptByNewGroup), the
// expiry removed, or set to StreamIdleTTL when that is set, in the same
// step (TestExpireWhenDrainedSecondGroupKeeps). With expire positive
// (pubsub.ExpireWhenDrained), a stream it creates (MKSTREAM: empty, drained,
// with only this group) is set to expire after expire, as the ack that
// drains a stream sets it: a subscriber killed before any ack left it for
// ever (TestExpireWhenDrainedNewStreamExpires). A BUSYGROUP error when the
// group exists.
func (s *streamBus) createGroupCmd(ctx context.Context, c redis.Scripter, key, group, start string, expire time.Duration) *redis.Cmd {
	ms := int64(0)
	if expire > 0 {
		ms = max(expire.Milliseconds(), 1)
	}
	return createGroupScript.Eval(ctx, c, []string{key}, group, start, s.b.opts.StreamIdleTTL.Milliseconds(), ms)
}

// createGroup creates the group at start with MKSTREAM; an existing group
// keeps its position.
func (s *streamBus) createGroup(ctx context.Context, key, group, start string, expire time.Duration) error {
	err := s.createGroupCmd(ctx, s.b.client, key, group, start, expire).Err()
	s.b.reloadOnErr(ctx, err)
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("redisstreams: xgroup create %q %q: %w", key, group, err)
	}
	return nil
}

// Topic returns the subscribed topic.
func (g *groupSub) Topic() string { return g.topic }

func (g *groupSub) streamKey() string { return g.key }

// caughtUp reports whether the group has delivered every entry up to id and
// none of those is still pending on this consumer (handled and acked, or
// never ours), but for entries its handlers nacked that wait here for their
// redelivery.
func (g *groupSub) caughtUp(ctx context.Context, id string) (bool, error) {
	select {
	case <-g.done:
		return true, nil
	default:
	}
	if gone := g.s.goneUpTo(g.key); gone != "" && compareStreamIDs(id, gone) <= 0 {
		// Deleted by this Backend's DeleteTopic: the group (recreated
		// since, maybe) delivers none of it again.
		return !g.holdsUpTo(id), nil
	}
	pipe := g.s.b.client.Pipeline()
	groups := pipe.XInfoGroups(ctx, g.key)
	// Entries this consumer nacked and keeps for their redelivery are
	// pending too, and do not hold Flush up (pubsub.PubSub.Flush:
	// deliveries handed to handlers): read one more than there are. A
	// handler may nack between this count and the reply, so a reply that
	// fills the count may not hold every pending entry: it does not show
	// the consumer caught up (TestReview55FlushRacesANack).
	count := int64(g.nackedCount()) + 1
	pend := pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: g.key, Group: g.group, Start: "-", End: id, Count: count, Consumer: g.consumer,
	})
	// The stream's last entry: when the group has delivered it (or the
	// stream has none) but not id, id is not in the stream and never will
	// be delivered: it is gone (a server that restarted without its data,
	// FLUSHALL, a deletion by another process: the stream was made again
	// without it). TestReviewH75FlushAfterWipe. After a failover to a
	// server whose clock lags, this Backend's newer writes have lower ids
	// than id: they are waited for until the group delivered them.
	tail := pipe.XRevRangeN(ctx, g.key, "+", "-", 1)
	if ctx.Done() == nil {
		_, _ = pipe.Exec(ctx)
	} else {
		// Flush returns when its ctx ends, also while this check waits
		// for a server that stopped answering (awaitSend).
		done := make(chan struct{})
		if !g.s.b.awaitSend(ctx, done, func() {
			_, _ = pipe.Exec(ctx)
			close(done)
		}) {
			return false, ctx.Err()
		}
	}
	// withoutGroup: the group is missing from the stream (deleted with it,
	// or destroyed by another process's DeleteTopic; the stream made again
	// by a publish). This subscription recreates it from 0 at its next read
	// and delivers everything the stream holds: id is gone only when no
	// entry at or above it is in the stream (an event published after the
	// deletion is not: TestReviewH77GroupFlushAfterRecreatedStream).
	withoutGroup := func() bool {
		e, err := tail.Result()
		if err != nil || (len(e) > 0 && compareStreamIDs(e[0].ID, id) >= 0) {
			return false
		}
		return !g.holdsUpTo(id)
	}
	infos, err := groups.Result()
	switch {
	case isNoSuchKey(err):
		return !g.holdsUpTo(id), nil
	case isNoGroup(err):
		return withoutGroup(), nil
	case err != nil:
		return false, endedWith(ctx, err)
	}
	found := false
	for _, gi := range infos {
		if gi.Name == g.group {
			found = true
			if compareStreamIDs(gi.LastDeliveredID, id) < 0 {
				e, err := tail.Result()
				if err != nil || (len(e) > 0 && compareStreamIDs(e[0].ID, gi.LastDeliveredID) > 0) || g.holdsUpTo(id) {
					return false, nil
				}
				// Gone: what is pending here up to id is checked below.
			}
		}
	}
	if !found {
		return withoutGroup(), nil
	}
	p, err := pend.Result()
	switch {
	case isNoGroup(err):
		return withoutGroup(), nil
	case err != nil:
		return false, err
	}
	if int64(len(p)) >= count {
		return false, nil // perhaps more: the next poll counts again
	}
	for _, e := range p {
		if !g.nacked(e.ID) {
			return false, nil
		}
	}
	return true, nil
}

// nackedCount returns how many entries this consumer keeps nacked, waiting
// for their redelivery.
func (g *groupSub) nackedCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, m := range g.inflight {
		if m.waiting || m.resting {
			n++
		}
	}
	return n
}

// nacked reports whether this consumer keeps the entry id nacked, waiting
// for its redelivery.
func (g *groupSub) nacked(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.inflight[id]
	return m != nil && (m.waiting || m.resting)
}

// Unsubscribe stops deliveries, waits for running handlers (or ctx), hands
// back the entries no handler started and those it nacked and was to
// redeliver (cleanup), writes this consumer's acks and deletes the consumer
// from the group when it has nothing pending.
func (g *groupSub) Unsubscribe(ctx context.Context) error { return g.shutdown(ctx, false) }

func (g *groupSub) shutdown(ctx context.Context, byClose bool) error {
	g.once.Do(func() {
		g.byClose = byClose
		g.cancel()
		go func() {
			defer close(g.done)
			g.wg.Wait()
			g.err = g.cleanup()
			g.s.remove(g)
		}()
	})
	select {
	case <-g.done:
		return g.result(byClose)
	case <-ctx.Done():
		select {
		case <-g.done: // stopped already: the same answer whatever ctx
			return g.result(byClose)
		default:
			return ctx.Err()
		}
	}
}

// result is what a call that stopped g or waited for it to stop returns:
// pubsub.ErrClosed to an Unsubscribe when the Backend's Close stopped g
// first, else the cleanup's error.
func (g *groupSub) result(byClose bool) error {
	if g.byClose && !byClose {
		return pubsub.ErrClosed
	}
	return g.err
}

// cleanup runs once every goroutine of the subscription has returned. After
// a Shutdown gave up on the subscription's handlers it does nothing: the
// acker is stopped and the client may be closed, and the entries still
// pending here are redelivered after their AckDeadline.
func (g *groupSub) cleanup() error {
	if g.s.abandoned() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	// Entries read but never started: make them claimable at once by the
	// other members (IDLE far in the past), and undo the delivery count of
	// our read, so the next consumer sees its first attempt.
	// An entry we took over from another consumer keeps the count it had
	// before our claim.
	// Nacked entries are handed back the same way, keeping the attempts
	// they were given (the next delivery is the next attempt, counted
	// towards MaxDeliveries): those waiting for their redelivery delay
	// (retryLater), the one a Concurrency(1) handler was waiting out
	// (retryInPlace), and those whose handler failed as the subscription
	// stopped (process). Every handler has returned by now, so none of
	// them is running here. A waiting entry may have been taken over by
	// another member meanwhile (its AckDeadline ran out): it is handed back
	// only if it is still ours, checked in the same script.
	// Unstarted entries are handed back the same way (another member may
	// have claimed them too: ClaimPending takes live members' entries),
	// each with the count before our read or claim.
	g.mu.Lock()
	var back []*groupMsg
	for _, m := range g.inflight {
		switch {
		case m.waiting:
			if m.timer != nil {
				m.timer.Stop()
			}
			back = append(back, m)
		case !m.started && !m.lost:
			back = append(back, m)
		}
	}
	g.inflight, g.due = nil, nil
	g.mu.Unlock()
	if len(back) > 0 {
		args := g.handBackArgs()
		for _, m := range back {
			count := m.attempt - 1 // unstarted: undo our read or claim
			if m.waiting {
				count = m.attempt // nacked: it keeps the attempts it was given
			}
			args = append(args, m.id, count)
		}
		// Only entries still ours, checked and claimed in one step
		// (hand_back.lua).
		n, err := g.handBack(ctx, args)
		switch {
		case err != nil && !isNoGroup(err):
			g.s.b.opts.Logger.Warn("redisstreams: hand back unstarted or nacked entries failed; they are reclaimed after the ack deadline",
				"topic", g.topic, "group", g.group, "err", err)
		case err == nil && n > 0:
			g.s.nudgeGroup(g)
		}
	}
	ackErr := g.s.acks.flush(ctx, g.key)
	if ackErr != nil && !errors.Is(ackErr, errAcksGivenUp) {
		// The caller's ctx may not have ended: say what timed out
		// (review h66: a bare "context deadline exceeded").
		return fmt.Errorf("redisstreams: unsubscribe %q (group %q): its acks were not written within %v (Redis not answering?); their entries stay pending and are redelivered after their ack deadline: %w",
			g.topic, g.group, cleanupTimeout, ackErr)
	}
	// No read of this consumer runs from now on, however late the network
	// delivers it (read.lua refuses it without its guard), so one look
	// finds every entry a lost read delivered here. If the guard could not
	// be deleted, a second look (a server that stalled runs what it
	// buffered no later than the first command it answers as it resumes)
	// and the guard's expiry are what is left.
	if err := g.endGuard(ctx); err != nil {
		g.handBackUnseen(ctx)
	}
	g.handBackUnseen(ctx)
	// The consumer goes only if it holds nothing, checked and deleted in
	// one step: the entries handed back above, or those of a read whose
	// reply was lost (runReads), must keep it. Otherwise it stays until a
	// member that takes those entries over deletes it (claimQueue).
	_ = g.deleteConsumer(ctx, g.consumer)
	return ackErr // acks given up on: the entries stay pending, the consumer too
}

// cleanupTimeout bounds a group subscription's clean-up (groupSub.cleanup):
// its hand-back, the wait for its acks, its guard and consumer.
const cleanupTimeout = 10 * time.Second

// guardTombstone is what a guard holds after its subscription ended when a
// late command may still come (lateRisk): above every sequence number.
const guardTombstone = "9007199254740991"

// endGuard makes every later read of this consumer a no-op (read.lua): it
// deletes the guard, or, when a command of the subscription may still reach
// the server late (lateRisk), sets it to a tombstone that lives
// readGuardTTL, so that a late copy of its creation cannot bring it back.
func (g *groupSub) endGuard(ctx context.Context) error {
	if g.lateRisk.Load() {
		return g.s.b.client.Set(ctx, g.guard, guardTombstone, readGuardTTL).Err()
	}
	return g.s.b.client.Del(ctx, g.guard).Err()
}

// saw records that the subscription received entry id.
func (g *groupSub) saw(id string) {
	g.mu.Lock()
	if g.maxSeen == "" || compareStreamIDs(id, g.maxSeen) > 0 {
		g.maxSeen = id
	}
	if g.seenSince != nil {
		g.seenSince[id] = true
	}
	g.mu.Unlock()
}

// reserveLocked marks id as being claimed or recovered, unless it is
// queued here, already being taken, or handled by this Backend with its ack
// not yet written (acker.holds); it reports whether it did. Call with
// g.mu held.
func (g *groupSub) reserveLocked(id string) bool {
	if _, queued := g.inflight[id]; queued || g.claiming[id] {
		return false
	}
	if g.s.acks.holds(g.key, g.group, id) {
		return false
	}
	if g.claiming == nil {
		g.claiming = map[string]bool{}
	}
	g.claiming[id] = true
	return true
}

// release ends the reservations of ids (queued by now, or given up).
func (g *groupSub) release(ids []string) {
	if len(ids) == 0 {
		return
	}
	g.mu.Lock()
	for _, id := range ids {
		delete(g.claiming, id)
	}
	g.mu.Unlock()
}

// lostBatch is the most entries a lost-read check lists at once.
const lostBatch = 512

// handBackIdle is the idle time, in ms, a hand-back gives an entry: a year,
// so that any member may claim it at once.
const handBackIdle = int64(365 * 24 * time.Hour / time.Millisecond)

// ownPending lists up to count entries pending on this consumer with ids
// above after ("": from the start).
func (g *groupSub) ownPending(after string, count int64) *redis.XPendingExtArgs {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	return &redis.XPendingExtArgs{Stream: g.key, Group: g.group, Start: start, End: "+", Count: count, Consumer: g.consumer}
}

// checkLost is the part of a read pipeline that looks for a lost read: the
// entries pending on this consumer above the highest id it had received
// when a read first failed (lostFrom). It follows the read in the pipeline:
// once that read ran, no earlier one can (read.lua), so what a failed read
// delivered is pending here by then or never will be.
func (g *groupSub) checkLost(pipe redis.Pipeliner) *redis.XPendingExtCmd {
	return pipe.XPendingExt(g.ctx, g.ownPending(g.lostFrom, lostBatch))
}

// recoverLost merges what a read returned with what failed reads delivered
// to this consumer all the same (chk found them pending here, unknown), in
// stream order, so that they are queued before anything newer, and returns
// the first n of them (the read's tokens). What is left stays pending here
// unseen, for the next check. Lost entries were never run, so they keep
// their delivery count (the lost read's delivery is this one): not counted
// as a redelivery, nor as an extra attempt towards MaxDeliveries. It
// returns ok false when it could not fetch them: then nothing is queued,
// and every entry the read returned is left for the next check too. The
// checks end with the first clean one: it followed a read that ran, after
// which no earlier read runs, however late the network delivers it
// (read.lua refuses it).
//
// undos is g.undos as it was before the check was sent. When a claim of
// this member was undone since, the check may have seen one of its
// entries here, between the claim and the undo, which put it back on
// another consumer: such an entry must not run here, or it runs twice
// (any member's stale pass takes it from that consumer; seen in CI:
// TestReviewHandBackUnsyncedRunsTwice, "e1 ran twice: B (attempt 2) …
// then C (attempt 2)", with e1 pending on "dead" while B ran it). Then
// only what the read returned is taken, and the next read checks again.
func (g *groupSub) recoverLost(chk *redis.XPendingExtCmd, res []redis.XStream, now time.Time, n int, undos uint64) (msgs []*groupMsg, reserved []string, ok bool) {
	for _, xs := range res {
		for _, msg := range xs.Messages {
			msgs = append(msgs, &groupMsg{id: msg.ID, values: msg.Values, attempt: 1, received: now})
		}
	}
	pend, err := chk.Result()
	switch {
	case isNoGroup(err):
		// The group is gone (the next read creates it again): nothing is
		// pending in it.
		g.mu.Lock()
		g.lostFrom, g.seenSince, g.suspect = "", nil, false
		g.mu.Unlock()
		return msgs, nil, true
	case err != nil:
		return nil, nil, false
	}
	// The rest of what is pending here above lostFrom, window after
	// window: a full window (entries waiting out a redelivery delay, a
	// large lost read) must not hide older lost entries from the merge.
	for last := len(pend); last > 0 && last%lostBatch == 0; {
		more, err := g.s.b.client.XPendingExt(g.ctx, g.ownPending(pend[last-1].ID, lostBatch)).Result()
		if err != nil {
			return nil, nil, false
		}
		pend = append(pend, more...)
		if len(more) < lostBatch {
			break
		}
		last = len(pend)
	}
	read := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		read[m.id] = true
	}
	g.mu.Lock()
	if g.undos.Load() != undos {
		// (A claim still being undone holds its ids' reservations.)
		g.mu.Unlock()
		return msgs, nil, true
	}
	for _, p := range pend {
		if !g.seenSince[p.ID] && !read[p.ID] && g.reserveLocked(p.ID) {
			msgs = append(msgs, &groupMsg{id: p.ID, attempt: max(int(p.RetryCount), 1), received: now})
			reserved = append(reserved, p.ID)
		}
	}
	g.mu.Unlock()
	if len(msgs) == len(read) {
		g.mu.Lock()
		g.lostFrom, g.seenSince, g.suspect = "", nil, false
		g.mu.Unlock()
		return msgs, nil, true
	}
	slices.SortFunc(msgs, func(a, b *groupMsg) int { return compareStreamIDs(a.id, b.id) })
	msgs = msgs[:min(len(msgs), n)]
	pipe := g.s.b.client.Pipeline()
	fetch := make(map[string]*redis.XMessageSliceCmd)
	for _, m := range msgs {
		if !read[m.id] {
			fetch[m.id] = pipe.XRangeN(g.ctx, g.key, m.id, m.id, 1)
		}
	}
	if _, err := pipe.Exec(g.ctx); err != nil && err != redis.Nil {
		g.release(reserved)
		return nil, nil, false
	}
	var gone []string
	kept := msgs[:0]
	for _, m := range msgs {
		if f := fetch[m.id]; f != nil {
			got, _ := f.Result()
			if len(got) == 0 {
				gone = append(gone, m.id) // deleted (trimmed): nothing to run
				continue
			}
			m.values = got[0].Values
		}
		kept = append(kept, m)
	}
	if len(gone) > 0 {
		_ = g.ackGone(g.ctx, gone)
	}
	return kept, reserved, true
}

// refreshLost resets the idle time of what lost reads left pending here
// and the read loop has not taken yet (it takes no more than its tokens at
// a time), as refreshQueued does for queued entries, so that no other
// member takes them over as stale while they wait: each only if it is
// still pending here (hand_back.lua, with idle 0 and the count unchanged).
func (g *groupSub) refreshLost() {
	g.mu.Lock()
	suspect, from := g.suspect, g.lostFrom
	g.mu.Unlock()
	if !suspect {
		return
	}
	pend, err := g.s.b.client.XPendingExt(g.ctx, g.ownPending(from, 10*lostBatch)).Result()
	if err != nil {
		return
	}
	args := []any{g.group, g.consumer, 0}
	g.mu.Lock()
	for _, p := range pend {
		acked := g.s.acks.holds(g.key, g.group, p.ID)
		if _, queued := g.inflight[p.ID]; !queued && !acked && !g.seenSince[p.ID] && !g.claiming[p.ID] {
			args = append(args, p.ID, p.RetryCount)
		}
	}
	g.mu.Unlock()
	if len(args) > 3 {
		_ = handBackScript.Run(g.ctx, g.s.b.client, []string{g.key}, args...).Err()
	}
}

// handBackUnseen hands back, as cleanup does the unstarted ones, what reads
// whose replies were lost delivered here unseen (the subscription stopped
// before it found them all): the entries pending here above lostFrom that
// it never received, with the count of that delivery undone, so that the
// next consumer runs them as the attempt they are.
func (g *groupSub) handBackUnseen(ctx context.Context) {
	g.mu.Lock()
	suspect, from, seen := g.suspect, g.lostFrom, g.seenSince
	g.mu.Unlock()
	if !suspect {
		return
	}
	pend, err := g.s.b.client.XPendingExt(ctx, g.ownPending(from, 10*lostBatch)).Result()
	if err != nil {
		return // they stay pending here, reclaimed after the ack deadline
	}
	args := g.handBackArgs()
	for _, p := range pend {
		if !seen[p.ID] {
			args = append(args, p.ID, max(p.RetryCount-1, 0))
		}
	}
	if len(args) > 6 {
		n, err := g.handBack(ctx, args)
		switch {
		case err != nil && !isNoGroup(err):
			g.s.b.opts.Logger.Warn("redisstreams: hand back the entries of lost reads failed; they are reclaimed after the ack deadline",
				"topic", g.topic, "group", g.group, "err", err)
		case err == nil && n > 0:
			g.s.nudgeGroup(g)
		}
	}
}

// handBackMarkTTL is how long a hand-back notice (handBackMark) lives at
// most: the members of its group that read at least once in that time
// (every BlockTime at least, unless ReadOnDemand) see it. It goes earlier,
// with the consumer whose hand-back it tells of, once a member took that
// consumer's entries over (delete_consumer.lua).
const handBackMarkTTL = readGuardTTL

// handBackMark returns the hand-back notice key of group on topic, in the
// stream's hash slot (<prefix>:{<topic>}:handback:<group>): hand_back.lua
// gives it a value of its own (the stopping consumer's name, a NUL byte and
// a time) with each hand-back of the group's entries, so that the group's
// members in other processes, which look at it in a read's pipeline at most
// once a BlockTime, and a subscription that starts later, with its first
// read, run a reclaim pass at once rather than at their next periodic one
// (reclaimLoop).
func handBackMark(b *Backend, topic, group string) string {
	return b.keys.StreamMeta(topic, "handback:"+keys.Escape(group))
}

// deleteConsumer deletes the group's consumer name if it holds nothing
// (delete_consumer.lua), and the group's hand-back notice with it when the
// notice tells of that consumer's hand-back and no entry of the group is
// still handed back and unclaimed: a notice overwritten by a later
// hand-back stands for the earlier ones too, whose entries members of
// other processes would otherwise take only at their periodic pass
// (TestReviewBBNoticeKeptWhileHandedBackEntriesWait).
func (g *groupSub) deleteConsumer(ctx context.Context, name string) error {
	err := deleteConsumerScript.Run(ctx, g.s.b.client, []string{g.key, g.mark}, g.group, name, handBackIdle/2).Err()
	if isTryAgain(err) {
		// A migrating slot whose source lacks one of the keys: without
		// the notice (handBack).
		err = deleteConsumerScript.Run(ctx, g.s.b.client, []string{g.key}, g.group, name).Err()
	}
	return err
}

// handBack runs hand_back.lua with args (handBackArgs, then the entries)
// and returns how many entries it handed back. While the stream's slot
// migrates, Redis answers TRYAGAIN to a script of two keys unless both are
// on the node that gets it, and the notice exists only after a recent
// hand-back: the entries then go back without the notice (the group's
// members of this Backend are nudged all the same; those of other
// processes take them at their next pass), rather than staying on the
// stopped consumer for the ack deadline
// (TestReviewBBHandBackWhileSlotMigrates).
func (g *groupSub) handBack(ctx context.Context, args []any) (int, error) {
	n, err := handBackScript.Run(ctx, g.s.b.client, []string{g.key, g.mark}, args...).Int()
	if isTryAgain(err) {
		plain := append([]any{args[0], args[1], args[2]}, args[5:]...)
		n, err = handBackScript.Run(ctx, g.s.b.client, []string{g.key}, plain...).Int()
	}
	return n, err
}

// handBackArgs returns the first arguments of hand_back.lua for a hand-back
// by this subscription as it stops (claimable at once, idle a year), with
// the group's hand-back notice (KEYS[2]: handBackMark) to set: its
// lifetime and a value of its own. The group's subscriptions of this
// Backend are nudged besides (nudgeGroup).
func (g *groupSub) handBackArgs() []any {
	v := g.consumer + "\x00" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return []any{g.group, g.consumer, handBackIdle, handBackMarkTTL.Milliseconds(), v}
}

// nudgeGroup makes the other group subscriptions of this Backend to g's
// stream and group run a reclaim pass now.
func (s *streamBus) nudgeGroup(g *groupSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		if o, ok := sub.(*groupSub); ok && o != g && o.key == g.key && o.group == g.group {
			o.nudgeNow()
		}
	}
}

// nudgeNow makes reclaimLoop run a pass now: entries were handed back to
// the group. An on-demand subscription's pass then looks for them as if
// kicked.
func (g *groupSub) nudgeNow() {
	if g.cfg.ReadOnDemand {
		g.kicked.Store(true)
	}
	select {
	case g.nudge <- struct{}{}:
	default:
	}
}

// queueRead queues the entries of a read (their first delivery) for the
// handlers and returns how many there were. Once the subscription stops
// they stay in inflight only, unstarted: cleanup hands them back.
func (g *groupSub) queueRead(res []redis.XStream, now time.Time) int {
	got := 0
	for _, xs := range res {
		for _, msg := range xs.Messages {
			g.queue(&groupMsg{id: msg.ID, values: msg.Values, attempt: 1, received: now})
			got++
		}
	}
	return got
}

// queueMsgs queues msgs in order.
func (g *groupSub) queueMsgs(msgs []*groupMsg) {
	for _, m := range msgs {
		g.queue(m)
	}
}

// queue queues m for the handlers.
func (g *groupSub) queue(m *groupMsg) {
	g.saw(m.id)
	g.mu.Lock()
	g.inflight[m.id] = m
	g.mu.Unlock()
	select {
	case g.ch <- m:
	case <-g.ctx.Done():
	}
}

// Kick makes a ReadOnDemand subscription read what was published before the
// call (pubsub.Kicker); on other subscriptions it does nothing.
func (g *groupSub) Kick() {
	if !g.cfg.ReadOnDemand {
		return
	}
	g.kicked.Store(true)
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// readLoop reads new entries with XREADGROUP without BLOCK, on the
// client's pool, while there are free tokens: once at the start, then again
// and again while reads come back full (a ReadOnDemand subscription: full
// and short of the stream's last entry, which read.lua returns with the
// entries, read in the same step), and otherwise when kicked. It never
// holds a connection between reads. A Kick that arrives before a read
// starts is covered by that read (it sees every entry added before it); one
// that arrives later makes another read.
//
// A ReadOnDemand subscription is kicked only by its caller (Kick). Any
// other is kicked by the Backend's shared blocking reader (the fan-out
// reader of its stream, see fanReader): after a short read the
// subscription registers the id of the stream's last entry it has seen
// (read with XREVRANGE in the same pipeline, just before the XREADGROUP) as
// its bell, and the shared reader rings it when the stream gets an entry
// above it. BlockTime bounds the wait between reads, as a safety net. So
// group subscriptions, however many, hold no connection of their own.
func (g *groupSub) readLoop() {
	if g.cfg.ClaimPending {
		g.claimPending()
		close(g.claimed)
	}
	bo := newRetry()
	more := true // the first read, then after full reads and failures
	var safety *time.Timer
	if !g.cfg.ReadOnDemand {
		safety = time.NewTimer(g.s.b.opts.BlockTime)
		defer safety.Stop()
	}
	defer g.dropBell()
	for g.ctx.Err() == nil {
		if !more {
			if safety == nil {
				select {
				case <-g.kick:
				case <-g.ctx.Done():
					return
				}
			} else {
				safety.Reset(g.s.b.opts.BlockTime)
				select {
				case <-g.kick:
				case <-safety.C:
				case <-g.ctx.Done():
					return
				}
			}
		}
		n := g.takeTokens()
		if n == 0 {
			return
		}
		select { // this read covers a Kick that came before it
		case <-g.kick:
		default:
		}
		var (
			last *redis.XMessageSliceCmd
			mark *redis.StringCmd
		)
		// The commands are built on a pipeline that is never executed
		// and sent by runReads, with other subscriptions' reads.
		pipe := g.s.b.client.Pipeline()
		// A command go-redis never retries makes it retry none of the
		// pipeline (per node on a Cluster, hence one per read): a retried
		// read would be refused (read.lua) and have to be recovered from.
		noRetry(g.ctx, pipe, g.key)
		if !g.cfg.ReadOnDemand {
			last = pipe.XRevRangeN(g.ctx, g.key, "+", "-", 1)
			if time.Since(g.markAt) >= g.s.b.opts.BlockTime {
				// At most once a BlockTime: did a member hand entries
				// back since we last looked (handBackNotice)?
				mark = pipe.Get(g.ctx, g.mark)
			}
		}
		// XREADGROUP ... > in read.lua: it runs only if no later read of
		// this consumer ran and the subscription has not ended, so a read
		// the network delivers late runs nothing.
		g.readSeq++
		// read.lua's first XREADGROUP reads as many entries as the
		// biggest of the previous read's fit in readBudget (1 before any).
		first := 1
		if g.readBiggest > 0 {
			first = max(1, min(n, readBudget/g.readBiggest))
		}
		args := []any{g.group, g.consumer, fmt.Sprintf("%d/%d", n, first), g.readSeq, readGuardTTL.Milliseconds()}
		if g.cfg.ReadOnDemand {
			// With the stream's last entry, read in the same step: when
			// the read returned it, nothing the kick covers is left
			// unread, and no second read is needed to find that out.
			args = append(args, "tail")
		}
		if g.cfg.ExpireWhenDrained > 0 {
			// A read that returns entries takes back the stream's
			// expiry (pubsub.ExpireWhenDrained; with StreamIdleTTL it
			// sets that), in the same step: an entry
			// whose PublishFor left it (a process of a version before
			// publish_for.lua removed it) is not deleted with the
			// stream while it is pending or while later ones wait.
			if !g.cfg.ReadOnDemand {
				args = append(args, "")
			}
			args = append(args, g.s.b.opts.StreamIdleTTL.Milliseconds())
		}
		read := pipe.EvalSha(g.ctx, readScript.Hash(), []string{g.key, g.guard}, args...)
		var chk *redis.XPendingExtCmd
		undos := g.undos.Load()
		if g.suspect {
			chk = g.checkLost(pipe) // after the read: see checkLost
		}
		var (
			res  []redis.XStream
			tail string // the stream's last entry as the read saw it ("tail")
		)
		err := g.s.runReads(g.ctx, g.key, pipe.Cmds())
		var unsynced error // with PublishSyncReplicas: see runReads
		if errors.Is(err, ErrNotReplicated) {
			unsynced, err = err, nil
		}
		sent := err == nil
		if sent && mark != nil {
			g.markAt = time.Now()
			if v, merr := mark.Result(); merr == nil && v != g.markSeen {
				g.markSeen = v
				g.nudgeNow()
			}
		}
		if sent {
			res, tail, err = readReply(read, g.cfg.ReadOnDemand)
			if unsynced != nil && (err == nil || chk != nil) {
				// It delivered (or would recover) entries whose delivery
				// the replicas have not acknowledged: hand nothing on,
				// as after a read whose reply was lost.
				err = unsynced
			}
		} else {
			last = nil // unanswered: never read it
		}
		now := time.Now()
		switch {
		case err == redis.Nil && chk == nil:
			bo.Reset()
			g.putTokens(n)
			more = false
			g.setBell(last, nil)
			continue
		case isNoScript(err):
			// Never ran: the server lost its scripts (a restart).
			g.putTokens(n)
			if lerr := readScript.Load(g.ctx, g.s.b.client).Err(); lerr != nil {
				g.fail(lerr, &bo)
			}
			more = true
			continue
		case redis.HasErrorPrefix(err, "NOGUARD"):
			// Never ran: the guard expired (no read for readGuardTTL) or
			// the server lost it. Reads up to this one stay refused; the
			// guard only ever goes up (raise_guard.lua), also when this
			// call reaches the server late.
			g.putTokens(n)
			g.lateRisk.Store(true)
			if serr := raiseGuardScript.Run(g.ctx, g.s.b.client, []string{g.guard}, g.readSeq, readGuardTTL.Milliseconds()).Err(); serr != nil {
				g.fail(serr, &bo)
			}
			more = true
			continue
		case isNoGroup(err):
			g.putTokens(n)
			g.mu.Lock()
			g.maxSeen = "" // a new group: ids start over
			g.mu.Unlock()
			g.recreate(&bo)
			more = true
			continue
		case err != nil && err != redis.Nil:
			g.putTokens(n)
			if sent && !g.suspect {
				// It may have run on the server all the same (also when
				// the subscription is stopping: cleanup hands back what
				// it delivered): its entries would be pending here, unseen.
				g.mu.Lock()
				g.suspect, g.lostFrom, g.seenSince = true, g.maxSeen, map[string]bool{}
				g.mu.Unlock()
			}
			g.fail(err, &bo)
			more = true
			continue
		}
		bo.Reset()
		if chk != nil {
			msgs, reserved, ok := g.recoverLost(chk, res, now, n, undos)
			if !ok {
				g.putTokens(n)
				g.fail(errors.New("checking for the entries of a lost read failed"), &bo)
				more = true
				continue
			}
			g.queueMsgs(msgs)
			g.release(reserved) // queued (or left pending, for the next check)
			g.putTokens(n - len(msgs))
			more = true // read again (and check again) until a check is clean
			if !g.suspect {
				more = len(msgs) == n && !readToEnd(res, tail)
				if !more {
					g.setBell(last, res)
				}
			}
			continue
		}
		got := g.queueRead(res, now)
		g.putTokens(n - got)
		// A read that reached read.lua's byte budget may have stopped
		// short of its count with more entries waiting: read again.
		bytes, biggest := readBytes(res)
		if got > 0 {
			g.readBiggest = biggest
		}
		more = (got == n || bytes >= readBudget) && !readToEnd(res, tail)
		if !more {
			g.setBell(last, res)
		}
	}
}

// readReply decodes what read.lua returned: XREADGROUP's reply as Lua
// passes it on (arrays), or its error (redis.Nil when nothing was new);
// with tail (the read asked for "tail"), also the id of the stream's last
// entry as the read saw it ("" when the stream was empty).
func readReply(cmd *redis.Cmd, tail bool) ([]redis.XStream, string, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, "", err
	}
	if !tail {
		res, err := readStreams(v)
		return res, "", err
	}
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return nil, "", fmt.Errorf("redisstreams: unexpected read reply %v", v)
	}
	last, _ := pair[1].(string)
	if pair[0] == nil || pair[0] == false { // nothing new (Lua's false, as RESP2 or RESP3 carries it)
		return nil, last, redis.Nil
	}
	res, err := readStreams(pair[0])
	return res, last, err
}

// readStreams decodes XREADGROUP's reply as Lua passes it on.
func readStreams(v any) ([]redis.XStream, error) {
	bad := func() ([]redis.XStream, error) {
		return nil, fmt.Errorf("redisstreams: unexpected read reply %v", v)
	}
	streams, ok := v.([]any)
	if !ok {
		return bad()
	}
	res := make([]redis.XStream, 0, len(streams))
	for _, st := range streams {
		pair, ok := st.([]any)
		if !ok || len(pair) != 2 {
			return bad()
		}
		name, _ := pair[0].(string)
		entries, ok := pair[1].([]any)
		if !ok {
			return bad()
		}
		msgs := make([]redis.XMessage, 0, len(entries))
		for _, e := range entries {
			ent, ok := e.([]any)
			if !ok || len(ent) != 2 {
				return bad()
			}
			id, ok := ent[0].(string)
			if !ok {
				return bad()
			}
			fields, _ := ent[1].([]any)
			values := make(map[string]any, len(fields)/2)
			for i := 0; i+1 < len(fields); i += 2 {
				k, ok := fields[i].(string)
				if !ok {
					return bad()
				}
				values[k] = fields[i+1]
			}
			msgs = append(msgs, redis.XMessage{ID: id, Values: values})
		}
		res = append(res, redis.XStream{Stream: name, Messages: msgs})
	}
	return res, nil
}

// readBudget is about how many bytes of entries (their fields and values)
// one group read returns at most (read.lua stops once it has that many; an
// entry bigger than it is read alone): read.lua passes its reply through
// Lua, which took 13.4s for 256 entries of 1 MiB, the server answering no
// client meanwhile (review h72, TestReviewH72BigEventBacklogBlocksServer).
// Keep it equal to read.lua's budget.
const readBudget = 1 << 20

// readBytes sums the lengths of the fields and values of the entries of
// res, as read.lua counts them against readBudget, and returns the
// biggest entry's too.
func readBytes(res []redis.XStream) (total, biggest int) {
	for _, xs := range res {
		for _, m := range xs.Messages {
			size := 0
			for k, v := range m.Values {
				size += len(k)
				if s, ok := v.(string); ok {
					size += len(s)
				}
			}
			total += size
			biggest = max(biggest, size)
		}
	}
	return total, biggest
}

// readToEnd reports whether a read returned the stream's last entry, tail
// as the read saw it; false when tail is unknown ("").
func readToEnd(res []redis.XStream, tail string) bool {
	if tail == "" {
		return false
	}
	for _, xs := range res {
		if n := len(xs.Messages); n > 0 && compareStreamIDs(xs.Messages[n-1].ID, tail) >= 0 {
			return true
		}
	}
	return false
}

// setBell registers (or moves) the subscription's bell on the shared
// reader after a short read: at the highest of the stream's last entry as
// read just before the XREADGROUP and the entries the read returned. A
// ReadOnDemand subscription has no bell. An unknown last entry (the
// XREVRANGE failed) rings at once: the subscription reads again.
func (g *groupSub) setBell(last *redis.XMessageSliceCmd, res []redis.XStream) {
	if last == nil {
		return
	}
	cursor := "0-0"
	msgs, err := last.Result()
	switch {
	case err != nil && err != redis.Nil:
		g.ring()
		return
	case len(msgs) > 0:
		cursor = msgs[0].ID
	}
	for _, xs := range res {
		for _, m := range xs.Messages {
			if compareStreamIDs(m.ID, cursor) > 0 {
				cursor = m.ID
			}
		}
	}
	r := g.s.readerFor(g.key)
	r.mu.Lock()
	for r.retired { // its last user left meanwhile (so the bell is not on it): a new reader
		r.mu.Unlock()
		r = g.s.readerFor(g.key)
		r.mu.Lock()
	}
	fresh := g.bellOn == nil
	if fresh {
		st := r.streams[g.key]
		if st == nil {
			st = &fanStream{key: g.key, topic: g.topic}
			r.streams[g.key] = st
		}
		st.bells = append(st.bells, g)
		g.bellOn = r
	}
	g.bellCursor = cursor
	r.mu.Unlock()
	if fresh {
		r.wake() // a stream the shared read may not cover yet
	}
}

// dropBell removes the subscription's bell from the shared reader.
func (g *groupSub) dropBell() {
	r := g.bellOn
	if r == nil {
		return
	}
	r.mu.Lock()
	if st := r.streams[g.key]; st != nil {
		for i, x := range st.bells {
			if x == g {
				st.bells = append(st.bells[:i], st.bells[i+1:]...)
				break
			}
		}
		if len(st.subs) == 0 && len(st.bells) == 0 {
			delete(r.streams, g.key)
		}
	}
	idle := len(r.streams) == 0
	r.mu.Unlock()
	if idle {
		g.s.retireIfIdle(r)
	}
}

// ring makes the read loop read again (the shared reader saw a new entry).
func (g *groupSub) ring() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// claimPending takes over every entry of the group pending on another
// consumer (live or dead), in stream id order, and queues each for the
// handlers as a redelivery, before readLoop reads any new entry. It walks the
// group's pending list with XPENDING from the last id it examined, a batch of
// up to the free tokens at a time, and claims each batch with XCLAIM at
// min-idle 0. The delivery count comes from XPENDING; XCLAIM adds one.
func (g *groupSub) claimPending() {
	bo := newRetry()
	after := ""
	for g.ctx.Err() == nil {
		n := g.takeTokens()
		if n == 0 {
			return
		}
		used, last, done, err := g.claimBatch(after, n)
		g.putTokens(n - used)
		switch {
		case isNoGroup(err):
			// A new group has nothing pending.
			g.recreate(&bo)
			return
		case err != nil:
			g.fail(err, &bo)
			continue
		}
		bo.Reset()
		if done {
			return
		}
		after = last
	}
}

// claimBatch claims up to n pending entries with ids above after ("": from
// the start) and queues them; it returns how many it queued, the last id it
// examined and whether the pending list is exhausted.
func (g *groupSub) claimBatch(after string, n int) (used int, last string, done bool, err error) {
	start := "-"
	if after != "" {
		start = nextStreamID(after)
	}
	ctx := g.ctx
	pend, err := g.s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: g.key, Group: g.group, Start: start, End: "+", Count: int64(n),
	}).Result()
	if err != nil {
		return 0, after, false, err
	}
	if len(pend) == 0 {
		return 0, after, true, nil
	}
	last = pend[len(pend)-1].ID
	done = len(pend) < n
	used, err = g.claimQueue(ctx, pend, 0)
	if err != nil {
		return 0, after, false, err
	}
	return used, last, done, nil
}

// claimQueue claims the entries of pend that are not in flight here, with
// XCLAIM at minIdle, and queues each for a handler with its attempt number
// (the delivery count XPENDING reported, plus this delivery). It returns how
// many it queued. With minIdle 0, an id XCLAIM did not return was acked
// meanwhile, or its entry was deleted: Redis 7 drops a deleted entry from the
// pending list, older servers (and miniredis) keep it, claimed by us. Such
// ids are acked, a no-op in the first case that removes them in the second.
func (g *groupSub) claimQueue(ctx context.Context, pend []redis.XPendingExt, minIdle time.Duration) (used int, err error) {
	counts := make(map[string]int64, len(pend))
	var ids []string
	from := map[string]bool{} // the other consumers the entries are taken from
	g.mu.Lock()
	for _, p := range pend {
		own := p.Consumer == g.consumer
		if own && g.suspect && (g.lostFrom == "" || compareStreamIDs(p.ID, g.lostFrom) > 0) {
			continue // a lost read's: the read loop recovers it, in order
		}
		if !g.reserveLocked(p.ID) {
			continue // queued here, or being taken by a recovery
		}
		counts[p.ID] = p.RetryCount
		ids = append(ids, p.ID)
		if !own {
			from[p.Consumer] = true
		}
		// An entry of its own that it does not hold may have run here
		// (a claim that failed, an ack not written): its next delivery
		// counts as the next attempt, as any other claim.
	}
	g.mu.Unlock()
	defer g.release(ids)
	if len(ids) == 0 {
		return 0, nil
	}
	msgs, err := g.s.xclaim(ctx, &redis.XClaimArgs{
		Stream: g.key, Group: g.group, Consumer: g.consumer,
		MinIdle: minIdle, Messages: ids,
	})
	if errors.Is(err, ErrNotReplicated) {
		// Claimed on the master, but the replicas did not acknowledge
		// it: a failover could undo the claim (and the unacknowledged
		// read that first delivered an entry with it), so hand nothing
		// on, and put the entries back as they were: claimPending
		// retries, a stale pass (this member's or another's) claims
		// them again later.
		g.undoClaim(ctx, msgs, pend)
		g.undos.Add(1) // before the deferred release: see recoverLost
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	// A consumer whose entries were all taken holds nothing more: delete
	// it (only if so, in one step), or the consumers of stopped
	// subscriptions, which cleanup keeps while they hold entries, would
	// pile up. A live one that reads again is recreated by its read.
	for c := range from {
		_ = g.deleteConsumer(ctx, c)
	}
	// The attempt is the count the claim set, read back: the listed count
	// may be stale (claimedCounts).
	got := make([]string, 0, len(msgs))
	for _, msg := range msgs {
		if msg.Values != nil {
			got = append(got, msg.ID)
		}
	}
	after := g.s.claimedCounts(ctx, g.key, g.group, g.consumer, got)
	now := time.Now()
	claimed := make(map[string]bool, len(msgs))
	for _, msg := range msgs {
		if msg.Values == nil {
			continue // deleted (trimmed) entry
		}
		claimed[msg.ID] = true
		g.saw(msg.ID)
		attempt := int(counts[msg.ID]) + 1
		if c, ok := after[msg.ID]; ok && int(c) > attempt {
			attempt = int(c)
		}
		m := &groupMsg{id: msg.ID, values: msg.Values, attempt: attempt, received: now}
		g.mu.Lock()
		g.inflight[m.id] = m
		g.mu.Unlock()
		g.ch <- m
		used++
	}
	if minIdle > 0 {
		// Under a minimum idle time XCLAIM also skips entries that became
		// busy again since XPENDING: those are not gone. But one it
		// skipped may have been deleted, and dropped from the pending
		// list by the XCLAIM itself (Redis 7), with no ack.
		if len(claimed) < len(ids) {
			g.checkDrained(ctx)
		}
		return used, nil
	}
	var gone []string
	for _, id := range ids {
		if !claimed[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		if err := g.ackGone(ctx, gone); err != nil && !isNoGroup(err) {
			g.s.b.opts.Logger.Warn("redisstreams: ack of deleted pending entries failed", "topic", g.topic, "group", g.group, "err", err)
		}
	}
	return used, nil
}

// ackGone acks gone, entries pending in g's group that were deleted
// (trimmed) before a member ran them: one XACK, or, for a
// pubsub.ExpireWhenDrained subscription, delete_drained.lua's ack mode, as
// the acker sends that subscription's acks, so that an ack of a deleted
// entry that leaves the stream drained sets its expiry too
// (TestExpireWhenDrainedGoneAcks). It waits for the answer or for the
// client to give up.
func (g *groupSub) ackGone(ctx context.Context, gone []string) error {
	if g.cfg.ExpireWhenDrained <= 0 {
		return g.s.b.client.XAck(ctx, g.key, g.group, gone...).Err()
	}
	argv := make([]any, 0, 2+len(gone))
	argv = append(argv, g.group, max(g.cfg.ExpireWhenDrained.Milliseconds(), 1))
	for _, id := range gone {
		argv = append(argv, id)
	}
	c := newCall(ctx, deleteDrainedScript, []string{g.key}, argv...)
	g.s.b.sendCall(ctx, c)
	return c.cmd.Err()
}

// checkDrained sets g's stream to expire when it is drained, for a
// pubsub.ExpireWhenDrained subscription (delete_drained.lua's ack mode with
// no id), after an XCLAIM of g did not return an entry it asked for: Redis 7
// drops a deleted (trimmed) entry from the pending list in XCLAIM itself,
// with no XACK, which can leave the stream drained with no ack to set the
// expiry (TestExpireWhenDrainedGoneAcks). Otherwise it does nothing.
func (g *groupSub) checkDrained(ctx context.Context) {
	if g.cfg.ExpireWhenDrained > 0 {
		_ = g.ackGone(ctx, nil)
	}
}

// undoClaim puts the entries msgs of a claim the replicas did not
// acknowledge back as pend (XPENDING before the claim) had them: on their
// earlier consumer, with their earlier idle time and delivery count
// (undo_claim.lua; only those still pending here). Kept here, they would
// count as this member's own: a suspect read loop took one as a lost
// read's entry while any member's stale pass could take it too (two
// handlers at once: TestReviewHandBackUnsyncedRunsTwice), an on-demand
// subscription stopped looking for it (no other member held anything:
// TestReviewHandBackOnDemandBusyStuck), and each unacknowledged claim
// raised the count of an entry no handler ran, to dead-lettering after a
// few seconds of stall (TestReviewUnsyncedClaimsInflateCount). Should the
// undo fail, the entries stay here, taken as stale after AckDeadline (an
// on-demand subscription looks for them again only when kicked). The
// idle time and count put back are XPENDING's: a change between XPENDING
// and the claim (its holder's own retry raising the count) is undone too,
// which can make a later attempt number repeat an earlier one.
func (g *groupSub) undoClaim(ctx context.Context, msgs []redis.XMessage, pend []redis.XPendingExt) {
	before := make(map[string]redis.XPendingExt, len(pend))
	for _, p := range pend {
		before[p.ID] = p
	}
	args := []any{g.group, g.consumer}
	for _, m := range msgs {
		if p, ok := before[m.ID]; ok && m.Values != nil {
			args = append(args, m.ID, p.Consumer, p.Idle.Milliseconds(), p.RetryCount)
		}
	}
	if len(args) > 2 {
		if err := undoClaimScript.Run(ctx, g.s.b.client, []string{g.key}, args...).Err(); err != nil && !isNoGroup(err) {
			g.s.b.opts.Logger.Warn("redisstreams: putting back entries of a claim the replicas did not acknowledge failed; they are taken over after the ack deadline",
				"topic", g.topic, "group", g.group, "err", err)
		}
	}
}

// nextStreamID returns the smallest entry id above id.
func nextStreamID(id string) string {
	x, ok := parseStreamID(id)
	if !ok {
		return id
	}
	if x.seq == math.MaxUint64 {
		return strconv.FormatUint(x.ms+1, 10) + "-0"
	}
	return strconv.FormatUint(x.ms, 10) + "-" + strconv.FormatUint(x.seq+1, 10)
}

// takeTokens waits for one free token and takes up to BatchSize; 0 when the
// subscription stops.
func (g *groupSub) takeTokens() int {
	select {
	case <-g.tokens:
	case <-g.ctx.Done():
		return 0
	}
	n := 1
	for n < g.s.b.opts.BatchSize {
		select {
		case <-g.tokens:
			n++
		default:
			return n
		}
	}
	return n
}

func (g *groupSub) putTokens(n int) {
	for range n {
		g.tokens <- struct{}{}
	}
}

// recreate makes the group again after NOGROUP (the stream was deleted, or
// Redis restarted without its data), from 0: everything in the new stream
// is delivered.
func (g *groupSub) recreate(bo *backoff.Backoff) {
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Second)
	defer cancel()
	if err := g.s.createGroup(ctx, g.key, g.group, "0", g.cfg.ExpireWhenDrained); err != nil {
		g.fail(err, bo)
		return
	}
	g.s.b.opts.Logger.Info("redisstreams: consumer group was missing; recreated it", "topic", g.topic, "group", g.group)
}

func (g *groupSub) fail(err error, bo *backoff.Backoff) {
	if g.ctx.Err() != nil {
		return
	}
	g.s.b.opts.Logger.Warn("redisstreams: group read failed; retrying", "topic", g.topic, "group", g.group, "err", err)
	if isMoved(err) {
		g.s.reloadCluster(g.ctx)
	}
	_ = backoff.Sleep(g.ctx, bo.Next())
}

// work is one handler goroutine; it returns when the subscription stops.
func (g *groupSub) work() {
	for {
		var m *groupMsg
		select {
		case <-g.ctx.Done():
			return
		case m = <-g.ch:
		}
		g.process(m)
		g.tokens <- struct{}{}
	}
}

// process handles one attempt of an entry: acked, dead-lettered, left
// pending for another member, lost to one, or nacked. A nacked entry of a
// Concurrency(1) subscription is redelivered on the same handler after the
// redelivery delay (order); on a larger Concurrency it is left pending here,
// holding no handler, for retryLoop to deliver again after the delay, so
// that a nacked entry never holds up the others.
func (g *groupSub) process(m *groupMsg) {
	g.mu.Lock()
	since := time.Since(m.received)
	stale := !m.lost && since >= g.cfg.AckDeadline/2
	g.mu.Unlock()
	if stale && g.ctx.Err() == nil {
		// Queued long enough that our claim may not have been refreshed
		// (a pass that failed, a hand-back that failed and put it back)
		// and another member may have taken it over: start it only if it
		// is still ours, as retryInPlace does, claiming it again (JUSTID:
		// no delivery counted) at MinIdle the time since our claim, which
		// one taken over since no longer has. When that cannot be
		// checked, it is left pending here, to be taken over after the
		// ack deadline (review h72:
		// TestReviewH72BlackHoledMemberRunsTakenOverEvents: a member
		// black-holed past its hand-back ran 256 events a live member had
		// taken over and run).
		claimed, err := g.s.b.client.XClaimJustID(g.ctx, &redis.XClaimArgs{
			Stream: g.key, Group: g.group, Consumer: g.consumer,
			MinIdle: since, Messages: []string{m.id},
		}).Result()
		g.mu.Lock()
		switch {
		case g.ctx.Err() != nil:
		case err != nil || len(claimed) == 0:
			m.lost = true
		default:
			m.received = time.Now()
		}
		g.mu.Unlock()
	}
	g.mu.Lock()
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		return // handed back by cleanup
	}
	if m.lost {
		delete(g.inflight, m.id)
		g.mu.Unlock()
		if m.handedBack {
			// Handed back while the handlers were stuck: a handler is
			// free now, and the entries are pending on our consumer,
			// claimable; an on-demand member would otherwise take them
			// only at its next Kick (TestReview55OnDemandHandBackStrandsEvents).
			g.nudgeNow()
		}
		return // taken over by another member, or handed back
	}
	m.started, m.startAt = true, time.Now()
	g.mu.Unlock()

	ev, err := decodeEvent(m.values)
	if err != nil {
		note := &deadNote{}
		if g.s.deadLetterUndecodable(g.topic, m.id, m.values, err, note) == nil {
			g.ackDelivered(m.id, note)
		}
		g.forget(m.id)
		return
	}
	ev.DeliveryAttempt = m.attempt
	note := &deadNote{}
	if g.handle(m, ev, note) == nil {
		if !g.s.abandoned() { // a Shutdown that gave up on us: never ack
			g.ackDelivered(m.id, note)
		}
		g.forget(m.id)
		return
	}
	g.failed(m)
}

// failed settles the failed attempt of m, which a handler goroutine holds:
// kept for the hand-back when the subscription stopped, else redelivered
// after the redelivery delay.
func (g *groupSub) failed(m *groupMsg) {
	if g.ctx.Err() != nil {
		g.keepForHandBack(m) // failed as the subscription stopped
		return
	}
	if g.cfg.Concurrency == 1 {
		// In order: nothing later is delivered before this entry's next
		// attempt, so its one handler waits out the delay.
		g.retryInPlace(m)
		return
	}
	g.retryLater(m, g.p.RedeliveryDelay(m.attempt))
}

// handle runs the policy on ev, the current attempt of m, with note for a
// dead letter's ack. A handler that ends its goroutine instead of
// returning (runtime.Goexit, as testing's FailNow does) ends this handler
// goroutine: the attempt has failed (pubsub.ErrHandlerExited), and a new
// handler goroutine settles it as a failure (failed) and then takes this
// one's place, so that the entry is redelivered and the subscription keeps
// its Concurrency (pubsubtest's GoexitRedelivers). The caller must leave
// m to it on the way out (retryInPlace).
func (g *groupSub) handle(m *groupMsg, ev pubsub.Event, note *deadNote) error {
	returned := false
	defer func() {
		if returned {
			return
		}
		g.wg.Add(1) // before this goroutine's Done: Unsubscribe waits for both
		go func() {
			defer g.wg.Done()
			g.failed(m)
			g.tokens <- struct{}{}
			g.work()
		}()
	}()
	err := g.p.Handle(ackhook.With(context.WithValue(g.ctx, deadNoteKey{}, note), &note.acked), ev)
	returned = true
	return err
}

// retryInPlace redelivers the nacked entry m on the handler that had it,
// after the redelivery delay, until it is acked or the subscription stops:
// how a Concurrency(1) subscription keeps its order. When the subscription
// stops before the next attempt ran to its end, m is kept for cleanup to
// hand back, with the attempts it was given (keepForHandBack).
func (g *groupSub) retryInPlace(m *groupMsg) {
	kept := false
	defer func() {
		if !kept {
			g.forget(m.id)
		}
	}()
	for {
		g.mu.Lock()
		m.resting = true
		g.mu.Unlock()
		err := backoff.Sleep(g.ctx, g.p.RedeliveryDelay(m.attempt))
		g.mu.Lock()
		m.resting, m.startAt = false, time.Now() // not stuck while it claims it again (stuckLocked)
		g.mu.Unlock()
		if err != nil {
			kept = g.keepForHandBack(m)
			return
		}
		// Claim it again: that counts the attempt on the server. MinIdle is
		// the time since our own claim, so an entry another member has
		// taken over in the meantime (its idle time restarted) is left to it.
		// Another member may also have taken it over, run it and handed it
		// back (idle a year), raising its count: the attempt is the count
		// this claim set, read back in the same pipeline (claimedCount).
		pipe := g.s.b.client.Pipeline()
		claim := pipe.XClaim(g.ctx, &redis.XClaimArgs{
			Stream: g.key, Group: g.group, Consumer: g.consumer,
			MinIdle: time.Since(m.received), Messages: []string{m.id},
		})
		count := g.pendingCount(pipe, m.id)
		_, _ = pipe.Exec(g.ctx)
		msgs, err := claim.Result()
		if err != nil && g.ctx.Err() != nil {
			// Stopped during the claim, which may have run: the hand-back
			// sets the count back to the attempts m was given (no
			// handler ran this one), if it is still ours.
			kept = g.keepForHandBack(m)
			return
		}
		if err != nil || len(msgs) == 0 || msgs[0].Values == nil {
			if err == nil {
				g.checkDrained(g.ctx)
			}
			return
		}
		g.mu.Lock()
		m.received, m.startAt = time.Now(), time.Now()
		g.mu.Unlock()
		m.values = msgs[0].Values
		m.attempt = claimedCount(count, m.id, m.attempt+1)
		ev, err := decodeEvent(m.values)
		if err != nil {
			note := &deadNote{}
			if g.s.deadLetterUndecodable(g.topic, m.id, m.values, err, note) == nil {
				g.ackDelivered(m.id, note)
			}
			return
		}
		ev.DeliveryAttempt = m.attempt
		note := &deadNote{}
		kept = true // a handler's Goexit leaves m to the goroutine that takes over (handle)
		err = g.handle(m, ev, note)
		kept = false
		if err == nil {
			if !g.s.abandoned() {
				g.ackDelivered(m.id, note)
			}
			return
		}
		if g.ctx.Err() != nil {
			kept = g.keepForHandBack(m) // failed as the subscription stopped
			return
		}
	}
}

// keepForHandBack keeps the nacked entry m, whose subscription is
// stopping, in inflight as a waiting entry (with no timer), so that cleanup
// hands it back to the group at once, keeping the attempts it was given:
// a nacked entry that was to be redelivered here must not wait out the
// ack deadline on a consumer that stopped. It reports whether it kept m
// (not once cleanup has begun).
func (g *groupSub) keepForHandBack(m *groupMsg) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight == nil || g.inflight[m.id] != m {
		return false
	}
	m.waiting, m.timer = true, nil
	return true
}

// retryLater keeps the nacked entry m pending on this consumer, holding no
// handler and no token, and gives it to retryLoop after d (rounded up to a
// sixteenth of d, at most 10ms later).
func (g *groupSub) retryLater(m *groupMsg, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight == nil {
		return
	}
	m.waiting = true
	// Entries nacked within the same slice of time come due together
	// (slices of a sixteenth of the delay, at most 10ms), so that retryLoop
	// claims them in one pipeline.
	if q := min(d/16, 10*time.Millisecond); q > 0 {
		d += q - time.Duration(time.Now().Add(d).UnixNano()%int64(q))
	}
	m.timer = time.AfterFunc(d, func() {
		g.mu.Lock()
		if g.inflight == nil || g.inflight[m.id] != m || !m.waiting {
			g.mu.Unlock()
			return
		}
		g.due = append(g.due, m)
		g.mu.Unlock()
		select {
		case g.dueCh <- struct{}{}:
		default:
		}
	})
}

// retryLoop delivers nacked entries again once their delay passed: for each
// it waits for a free token, claims it again (which counts the attempt on
// the server; MinIdle is the time since our own claim, so an entry another
// member has taken over meanwhile, its idle time restarted, is left to it)
// and queues it for a handler. Entries due together are claimed in one
// pipeline, as many as there are free tokens (at most retryBatch), so that
// a burst of nacks (notices of threads busy elsewhere, say) comes back in a
// few round trips rather than one per entry.
func (g *groupSub) retryLoop() {
	batch := make([]*groupMsg, 0, retryBatch)
	cmds := make([]*redis.XMessageSliceCmd, 0, retryBatch)
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.dueCh:
		}
		for {
			g.mu.Lock()
			n := len(g.due)
			g.mu.Unlock()
			if n == 0 {
				break
			}
			select {
			case <-g.tokens:
			case <-g.ctx.Done():
				return
			}
			tokens := 1
		more:
			for tokens < min(n, retryBatch) {
				select {
				case <-g.tokens:
					tokens++
				default:
					break more
				}
			}
			g.mu.Lock()
			k := min(tokens, len(g.due))
			batch = append(batch[:0], g.due[:k]...)
			clear(g.due[:k])
			g.due = g.due[k:]
			minIdle := make([]time.Duration, k)
			for i, m := range batch {
				minIdle[i] = time.Since(m.received)
			}
			g.mu.Unlock()
			for range tokens - k {
				g.tokens <- struct{}{}
			}
			pipe := g.s.b.client.Pipeline()
			cmds = cmds[:0]
			counts := make([]*redis.XPendingExtCmd, len(batch))
			for i, m := range batch {
				cmds = append(cmds, pipe.XClaim(g.ctx, &redis.XClaimArgs{
					Stream: g.key, Group: g.group, Consumer: g.consumer,
					MinIdle: minIdle[i], Messages: []string{m.id},
				}))
				// The count this claim set: another member may have taken
				// it over, run it and handed it back meanwhile (claimedCount).
				counts[i] = g.pendingCount(pipe, m.id)
			}
			_, _ = pipe.Exec(g.ctx)
			stopping := g.ctx.Err() != nil
			missed := false
			for i, m := range batch {
				msgs, err := cmds[i].Result()
				if err != nil || len(msgs) == 0 || msgs[0].Values == nil {
					if !stopping {
						g.forget(m.id)
					} // else: still waiting, for cleanup to hand back
					missed = missed || err == nil
					g.tokens <- struct{}{}
					continue
				}
				g.mu.Lock()
				m.received = time.Now()
				m.values = msgs[0].Values
				m.attempt = claimedCount(counts[i], m.id, m.attempt+1)
				m.waiting, m.started, m.timer = false, false, nil
				g.mu.Unlock()
				g.ch <- m
			}
			if missed && !stopping {
				g.checkDrained(g.ctx)
			}
			clear(batch)
		}
	}
}

// pendingCount adds to pipe, after a claim of id, the look at id's delivery
// count on this consumer that claimedCount reads.
func (g *groupSub) pendingCount(pipe redis.Pipeliner, id string) *redis.XPendingExtCmd {
	return pipe.XPendingExt(g.ctx, &redis.XPendingExtArgs{
		Stream: g.key, Group: g.group, Start: id, End: id, Count: 1, Consumer: g.consumer,
	})
}

// claimedCount returns the attempt of a claim of our own nacked entry id:
// the delivery count the claim set, as cmd (pendingCount) read it, when
// that is above next, the attempt we counted ourselves. The two differ when
// another member took the entry over past its AckDeadline while it waited
// here, ran it and handed it back (idle a year, so our claim still takes
// it): counting from our own nack would run its attempt again
// (TestReviewH76NackedEntryTakenOverAndHandedBackKeepsCounting).
func claimedCount(cmd *redis.XPendingExtCmd, id string, next int) int {
	if pend, err := cmd.Result(); err == nil && len(pend) == 1 && pend[0].ID == id && int(pend[0].RetryCount) > next {
		return int(pend[0].RetryCount)
	}
	return next
}

// retryBatch is the most nacked entries retryLoop claims in one pipeline.
const retryBatch = 64

func (g *groupSub) forget(id string) {
	g.mu.Lock()
	delete(g.inflight, id)
	g.mu.Unlock()
}

// reclaimInterval is how often a group subscription looks for entries other
// consumers left unacked: half the ack deadline, within [10ms, 30s].
func (g *groupSub) reclaimInterval() time.Duration {
	return min(max(g.cfg.AckDeadline/2, 10*time.Millisecond), 30*time.Second)
}

// consumerReapIdle is how long a consumer of a group must have been idle,
// holding nothing, before a live member of the group deletes it. That is
// what becomes of the consumer of a member that died (SIGKILL, a lost host)
// with nothing pending: one that died holding entries is deleted by the
// member that takes them over, once it holds nothing. Deleting a live
// member's empty consumer loses nothing (the check and the deletion are
// one script, and its next read creates it again); the idle time only
// keeps live ones from being deleted and recreated all the time. A
// variable so that tests can shorten it.
var consumerReapIdle = 10 * time.Minute

// reapConsumers deletes the group's other consumers that hold nothing and
// were idle for consumerReapIdle.
func (g *groupSub) reapConsumers() {
	cs, err := g.s.b.client.XInfoConsumers(g.ctx, g.key, g.group).Result()
	if err != nil {
		return
	}
	for _, c := range cs {
		if c.Name == g.consumer || c.Pending > 0 || c.Idle < consumerReapIdle {
			continue
		}
		_ = g.deleteConsumer(g.ctx, c.Name)
	}
}

// reclaimLoop keeps queued entries ours, takes over others' stale ones, and
// now and then deletes the consumers of members that are gone.
func (g *groupSub) reclaimLoop() {
	select {
	case <-g.claimed:
	case <-g.ctx.Done():
		return
	}
	t := time.NewTicker(g.reclaimInterval())
	defer t.Stop()
	lastReap := time.Now()
	for {
		nudged := false
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		case <-g.nudge: // entries handed back (handBackNotice)
			nudged = true
		}
		var slots chan struct{}
		if g.cfg.ReadOnDemand {
			// One of onDemandPasses slots (of the key's master on a
			// Cluster), or skip this tick.
			slots = g.s.passSlots(g.key)
			select {
			case slots <- struct{}{}:
			default:
				continue
			}
		}
		g.reclaimPass(&lastReap, nudged)
		if slots != nil {
			<-slots
		}
	}
}

// onDemandPasses is how many on-demand group subscriptions (ReadOnDemand)
// of a Backend run their periodic pass at once; a subscription whose tick
// finds none free skips that tick (what it would have done waits for a
// later one: the kick that asked for it stays noted). There is one such
// subscription per thread tenure of the signals runtime, 10,000 with
// 10,000 threads active, each ticking every half ack deadline: unbounded,
// their passes (two or three calls each) took the client's whole pool and
// the lease renewals behind them missed their deadlines
// (BenchmarkActiveThreads10000: 3,632-6,000 of 10,000 leases lost on
// NewURL's default pool of 20). A variable so that tests can change it.
//
// On a *redis.ClusterClient the bound is per master (passSlots): every
// call of a pass is for its subscription's key, so on that master's own
// pool, which the bound keeps from being taken, and a master whose passes
// are slow does not take the other masters' slots. With a single set, a
// master whose replica stalled under PublishSyncReplicas, each of whose
// passes with something stale to claim waits the whole PublishSyncTimeout
// for WAIT, then puts the claim back and takes a slot again at once (its
// ticker ticked meanwhile), kept all 4 slots with 8 such subscriptions,
// and an on-demand subscription on a healthy master skipped every tick
// while the stall lasted: a dead member's entry there was not taken over
// 10s after the kick, 0 passes in 66-67 ticks, and 41ms after the stall
// ended (TestOnDemandStalledMasterSparesOtherMasters; 146-152ms without
// the stall, and 2-149ms with it once the slots were per master).
var onDemandPasses = 4

// passSlots returns the pass slots (onDemandPasses) an on-demand
// subscription on key takes for its pass: on a *redis.ClusterClient those
// of key's master as the client's map of slots has it (masterOf, which
// sends nothing), made at first use, at most maxLanes sets; the Backend's
// one set on any other client, when the map cannot tell, and beyond
// maxLanes masters. A pass that began before the key moved to another
// master keeps the slot it took.
func (s *streamBus) passSlots(key string) chan struct{} {
	m := s.b.masterOf(key)
	if m == "" {
		return s.passes
	}
	s.pmu.RLock()
	slots := s.masterPasses[m]
	s.pmu.RUnlock()
	if slots != nil {
		return slots
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if slots = s.masterPasses[m]; slots != nil {
		return slots
	}
	if len(s.masterPasses) >= maxLanes {
		// Forget the sets no pass holds a slot of: those of addresses
		// that are no masters any more (a failover, a node that came
		// back elsewhere), or of masters that are idle now, whose set
		// is made again when needed (review AA,
		// TestReviewAAPassSlotsForgetGoneMasters: before, the 65th
		// master address ever seen got the shared set). A caller that
		// took a set just before it is forgotten may still run a pass
		// on it: a brief excess, once per maxLanes new addresses.
		for a, ch := range s.masterPasses {
			if len(ch) == 0 {
				delete(s.masterPasses, a)
			}
		}
		if len(s.masterPasses) >= maxLanes {
			return s.passes
		}
	}
	if s.masterPasses == nil {
		s.masterPasses = make(map[string]chan struct{})
	}
	slots = make(chan struct{}, onDemandPasses)
	s.masterPasses[m] = slots
	return slots
}

// reclaimPass is one tick of reclaimLoop, or a pass a hand-back asked for
// (nudged): that one waits for a free handler slot, as reclaim does when
// told to wait, so that the entries handed back are not left for the next
// tick merely because every slot was taken by a read just then.
func (g *groupSub) reclaimPass(lastReap *time.Time, nudged bool) {
	if time.Since(*lastReap) >= consumerReapIdle/2 {
		*lastReap = time.Now()
		g.reapConsumers()
	}
	g.refreshLost()
	if g.cfg.ReadOnDemand && !g.kicked.Swap(false) {
		// Not told about anything new since the last pass, and no
		// other consumer held entries then (reclaim notes itself
		// kicked again when one did): nobody is using the
		// subscription's topic, so nothing a stale member read can be
		// waiting here (the next Kick or the next ClaimPending member
		// finds it).
		g.refreshQueued()
		return
	}
	g.refreshQueued()
	// Claim batch after batch while there is room and there are stale
	// entries (a severed connection can leave many behind at once).
	for more := g.reclaim(nudged); more && g.ctx.Err() == nil; {
		more = g.reclaim(true)
	}
}

// refreshQueued resets the idle time of entries waiting in the local queue,
// so that prefetched entries are not taken over merely for waiting. Entries
// whose idle time is already shorter than ours (another member took them
// over) are marked lost and skipped.
//
// When every handler has been running the same entry for longer than
// AckDeadline (hung, or far slower than the deadline says), the queued
// entries are handed back to the group instead (handBackQueued), so that
// live members run them rather than let them wait behind the stuck
// handlers for as long as those last (review h53:
// TestHungHandlerHoldsNoQueuedEvents).
func (g *groupSub) refreshQueued() {
	limit := g.cfg.AckDeadline / 4
	var (
		ids      []string
		youngest time.Time
		back     []*groupMsg
	)
	g.mu.Lock()
	stuck := g.stuckLocked()
	for id, m := range g.inflight {
		switch {
		case m.started || m.lost:
		case stuck:
			m.lost, m.handedBack = true, true // its handler skips it (process)
			back = append(back, m)
		case time.Since(m.received) >= limit:
			ids = append(ids, id)
			if m.received.After(youngest) {
				youngest = m.received // MinIdle must hold for every id
			}
		}
	}
	g.mu.Unlock()
	if len(back) > 0 {
		g.handBackQueued(back)
	}
	if len(ids) == 0 {
		return
	}
	claimed, err := g.s.b.client.XClaimJustID(g.ctx, &redis.XClaimArgs{
		Stream: g.key, Group: g.group, Consumer: g.consumer,
		MinIdle: time.Since(youngest), Messages: ids,
	}).Result()
	if err != nil {
		return
	}
	now := time.Now()
	ok := make(map[string]bool, len(claimed))
	for _, id := range claimed {
		ok[id] = true
	}
	g.mu.Lock()
	for _, id := range ids {
		if m := g.inflight[id]; m != nil && !m.started {
			if ok[id] {
				m.received = now
			} else {
				m.lost = true
			}
		}
	}
	g.mu.Unlock()
}

// stuckLocked reports whether every handler of g has been running one
// entry for longer than AckDeadline. A Concurrency(1) handler waiting out a
// nacked entry's delay (resting) is not stuck: in order, nothing later is
// delivered before that entry's next attempt. g.mu held.
func (g *groupSub) stuckLocked() bool {
	n := 0
	for _, m := range g.inflight {
		if m.started && !m.waiting && !m.resting && time.Since(m.startAt) > g.cfg.AckDeadline {
			n++
		}
	}
	return n >= g.cfg.Concurrency
}

// handBackQueued hands the queued entries back, unstarted, to the group
// as cleanup does (claimable at once, the count of our read or claim
// undone, the group's hand-back notice set, its other members of this
// Backend nudged), each only if it is still pending here. They are marked
// lost already, so no handler here starts them. If the hand-back fails
// (an Unsubscribe cancelled it, say), those still queued are unmarked, so
// that cleanup hands them back, a handler runs them or the next pass tries
// again (TestReview55UnsubscribeDuringStuckHandBack); one a handler dropped in
// between is taken over after the ack deadline. A hand-back whose reply
// was lost may have run: handing an entry back twice is harmless
// (hand_back.lua sets the same idle time and count).
func (g *groupSub) handBackQueued(back []*groupMsg) {
	args := g.handBackArgs()
	for _, m := range back {
		args = append(args, m.id, m.attempt-1)
	}
	n, err := g.handBack(g.ctx, args)
	if err != nil {
		g.mu.Lock()
		for _, m := range back {
			if g.inflight != nil && g.inflight[m.id] == m {
				m.lost, m.handedBack = false, false
			}
		}
		g.mu.Unlock()
	}
	switch {
	case err != nil:
		if g.ctx.Err() == nil && !isNoGroup(err) {
			g.s.b.opts.Logger.Warn("redisstreams: handing back the entries queued behind stuck handlers failed; tried again at the next pass while the handlers stay stuck",
				"topic", g.topic, "group", g.group, "err", err)
		}
	case n > 0:
		g.s.b.opts.Logger.Info("redisstreams: every handler of a group member ran one event longer than AckDeadline; the events queued behind them were handed back to the group",
			"topic", g.topic, "group", g.group, "consumer", g.consumer, "handed_back", n, "ack_deadline", g.cfg.AckDeadline)
		g.s.nudgeGroup(g)
	}
}

// reclaim claims entries pending longer than AckDeadline on any consumer
// (dead ones, typically), skipping those in flight here, as far as free
// tokens allow. The delivery count comes from XPENDING; XCLAIM adds one.
// It reports whether it claimed a full batch (there may be more). The
// entries of silent members (reclaimFromSilent) come first. When no token
// is free it waits up to a reclaim interval for one if wait is set or a
// silent member holds entries, and otherwise claims nothing.
//
// An on-demand subscription (ReadOnDemand) never waits: it holds one of
// the pass slots (onDemandPasses, passSlots), and waiting there for a token
// (its one token is taken for as long as a run of the signals runtime
// lasts) kept the slot a whole reclaim interval, long enough for four busy
// subscriptions to keep every slot (TestOnDemandPassSlotsNotHeld). Instead,
// while another consumer holds entries (stale or not yet), it notes itself
// kicked, so that a later tick looks again: before, a kick that came before
// such an entry was past the ack deadline was used up by a pass that could
// claim nothing yet, and no later pass looked (TestOnDemandKickBeforeStale).
func (g *groupSub) reclaim(wait bool) (more bool) {
	ctx := g.ctx
	// The group's other members that stopped reading (dead ones,
	// typically) and hold entries.
	silent, othersHold := g.silentConsumers(ctx)
	if othersHold && g.cfg.ReadOnDemand {
		defer g.kicked.Store(true)
	}
	n := g.takeFreeTokens(0)
	if n == 0 && !g.cfg.ReadOnDemand && (wait || len(silent) > 0) {
		// No handler slot free. Wait for one when asked to, or when a
		// silent member holds entries: under a steady load every slot may
		// be busy at every tick, and a dead member's entries (a dead
		// owner's wake notice) must not wait for the load to end.
		t := time.NewTimer(g.reclaimInterval())
		select {
		case <-g.tokens:
			n = g.takeFreeTokens(1)
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if n == 0 {
		return false
	}
	used := 0
	defer func() { g.putTokens(n - used) }()
	// First the silent members' entries: oldest first over the whole
	// group they may lie behind any number of entries that live members
	// hold idle (their handlers' running or waiting entries), which the
	// scan below could not get past.
	dead, full := g.reclaimFromSilent(ctx, silent, n)
	used += dead
	if full || used >= n {
		return true // a full batch: there may be more
	}
	rest := n - used
	pend, err := g.s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: g.key, Group: g.group, Idle: g.cfg.AckDeadline,
		Start: "-", End: "+", Count: int64(rest),
	}).Result()
	if err != nil || len(pend) == 0 {
		return false
	}
	u, _ := g.claimQueue(ctx, pend, g.cfg.AckDeadline)
	used += u
	return len(pend) == rest && u > 0
}

// takeFreeTokens returns have plus the tokens it took without waiting, up
// to BatchSize in all.
func (g *groupSub) takeFreeTokens(have int) int {
	n := have
	for n < g.s.b.opts.BatchSize {
		select {
		case <-g.tokens:
			n++
			continue
		default:
		}
		break
	}
	return n
}

// silentConsumers returns the group's other consumers that hold entries
// and have not read for AckDeadline (XINFO CONSUMERS idle), the longest
// silent first: members that died holding entries, typically. othersHold
// reports whether any other consumer holds entries (silent or not).
func (g *groupSub) silentConsumers(ctx context.Context) (silent []redis.XInfoConsumer, othersHold bool) {
	cs, err := g.s.b.client.XInfoConsumers(ctx, g.key, g.group).Result()
	if err != nil {
		return nil, false
	}
	silent = cs[:0]
	for _, c := range cs {
		if c.Name != g.consumer && c.Pending > 0 {
			othersHold = true
			if c.Idle >= g.cfg.AckDeadline {
				silent = append(silent, c)
			}
		}
	}
	slices.SortFunc(silent, func(a, b redis.XInfoConsumer) int { return cmp.Compare(b.Idle, a.Idle) })
	return silent, othersHold
}

// reclaimFromSilent claims, up to n entries, the entries pending longer than
// AckDeadline on the silent consumers, in order. It reports how many it
// claimed, and whether a consumer had more than that (a full batch).
func (g *groupSub) reclaimFromSilent(ctx context.Context, silent []redis.XInfoConsumer, n int) (used int, full bool) {
	for _, c := range silent {
		if used >= n {
			return used, true
		}
		want := n - used
		pend, err := g.s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: g.key, Group: g.group, Idle: g.cfg.AckDeadline,
			Start: "-", End: "+", Count: int64(want), Consumer: c.Name,
		}).Result()
		if err != nil || len(pend) == 0 {
			continue
		}
		u, _ := g.claimQueue(ctx, pend, g.cfg.AckDeadline)
		used += u
		if len(pend) == want && u > 0 {
			return used, true
		}
	}
	return used, false
}

// holdsUpTo reports whether an entry at or below id is queued or running
// here (its group or stream is gone: it is still handled). A nacked entry
// waiting for its redelivery does not count: the claim that would bring it
// back finds no group, or a new one without it, and drops it.
func (g *groupSub) holdsUpTo(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for mid, m := range g.inflight {
		if m.waiting || m.resting {
			continue
		}
		if compareStreamIDs(mid, id) <= 0 {
			return true
		}
	}
	return false
}
