package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/ackhook"
)

// acker writes the acks of group deliveries in batches, per lane (laneOf:
// on a Cluster client the stream's master as the client's map of slots has
// it when the ack is queued, on any other client one lane). Each lane that
// has acks to write runs one goroutine, which takes every ack queued in the
// lane and sends them as one pipeline of XACKs (one per stream and group),
// until none is left and none came for ackLaneIdle; then the lane goes. So a master that stops answering
// holds only its own lane's acks: before lanes, one pipeline carried the
// acks of every master, and one XACK for a paused master held every other
// group's acks, and every Unsubscribe waiting for them, until the client's
// timeouts (TestClusterStalledMasterSparesOtherAcks; in signals, a tenure
// that ended then held the Sends to its thread until CLUSTERDOWN:
// TestClusterStalledMasterSparesHealthyThreads). flush waits until the
// acks queued before it are written (all of them, or a stream's); close
// waits for the lanes to finish. The acks of a subscription made with
// pubsub.ExpireWhenDrained go as delete_drained.lua instead of XACK: the
// ack and, when it leaves the stream drained, the stream's expiry, in one
// step (TestExpireWhenDrained).
//
// Lifetime: a lane (its map entry and goroutine) lives while it has acks
// queued or being written, and ackLaneIdle after, or until close:
// TestAckerLanesGo. (Without the wait a lane's goroutine started for each
// ack of a sparse stream, and grew its stack anew through go-redis: 65-75µs
// per lone ack became 82-94µs; review of helper 40.)
type acker struct {
	b *Backend

	mu     sync.Mutex
	lanes  map[string]*ackLane // by lane name; present while its goroutine runs
	closed bool
	quit   chan struct{}  // closed by close: idle lanes go at once
	wg     sync.WaitGroup // the lanes' goroutines; Add only under mu, before closed

	// held counts the acks queued or being written, per entry (guarded by
	// mu): an entry acked by a handler of this Backend and still pending on
	// the server, which no subscription of the Backend claims (holds). An
	// entry leaves it when its ack is written or given up on.
	held map[ackRef]int
	// abandoned counts the acks close gave up on (guarded by mu): close
	// reports them.
	abandoned int

	// ctx bounds every write; close cancels it ackCloseGrace after it
	// began, and acks not written by then are given up on.
	ctx    context.Context
	cancel context.CancelFunc
}

// ackLane is the acks of one lane waiting to be written, or being written.
type ackLane struct {
	queue    []ackReq
	keys     map[string]int // streams with acks queued or being written here: how many
	enq      uint64         // acks queued here so far
	written  uint64         // acks finished (written, or given up after retries)
	progress chan struct{}  // closed, and replaced, whenever a batch is finished
	idle     bool           // its goroutine waits for acks (wake)
	wake     chan struct{}  // tells an idle goroutine that acks came (capacity 1)
	// lost lists the batches with acks given up on (the newest
	// maxLostSpans): flush reports them when they overlap what it waited
	// for.
	lost []lostSpan
}

// lostSpan is a batch of a lane, the acks from+1 to to in the order they
// were queued (ackLane.enq), in which the acks of streams keys were given
// up on.
type lostSpan struct {
	from, to uint64
	keys     map[string]bool
}

// maxLostSpans bounds ackLane.lost.
const maxLostSpans = 64

// ackLaneIdle is how long a lane's goroutine waits for more acks once it
// has written all it had, before the lane goes.
const ackLaneIdle = time.Second

// ackCloseGrace is how long the acker's close keeps trying to write the
// remaining acks. An ack given up on leaves its entry pending, redelivered
// after its AckDeadline (at-least-once, never lost), so a Close on a Redis
// that stopped answering returns instead of retrying for minutes.
const ackCloseGrace = 10 * time.Second

// ackReq is one ack to write: entry id of stream key in group, and, when
// expire is positive, the expiry to set on the stream if the ack leaves it
// drained (pubsub.ExpireWhenDrained).
type ackReq struct {
	key, group, id string
	expire         time.Duration
	hook           *ackhook.Hook // fired once the ack is finished; may be nil
}

// ackRef names the entry an ackReq acks (acker.held).
type ackRef struct{ key, group, id string }

func (r ackReq) ref() ackRef { return ackRef{r.key, r.group, r.id} }

func (a *acker) init(b *Backend) {
	a.b = b
	a.lanes = make(map[string]*ackLane)
	a.quit = make(chan struct{})
	a.ctx, a.cancel = context.WithCancel(context.Background())
}

// add queues the ack of entry id of stream key in group (with expire
// positive, pubsub.ExpireWhenDrained's; hook, when not nil, is fired once
// the ack is finished, written or given up on), and starts its
// lane's goroutine when the lane had nothing to write. Until the ack is
// finished (written, or given up on) holds reports it. After close it does
// nothing: the entry stays pending and is redelivered after its
// AckDeadline.
func (a *acker) add(key, group, id string, expire time.Duration, hook *ackhook.Hook) {
	name := a.b.laneOf(key) // outside mu: it reads the client's map of slots
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		if hook != nil {
			hook.Fire() // given up on
		}
		return
	}
	defer a.mu.Unlock()
	l := a.lanes[name]
	if l == nil {
		l = &ackLane{keys: make(map[string]int), progress: make(chan struct{}), wake: make(chan struct{}, 1)}
		a.lanes[name] = l
		a.wg.Add(1)
		go a.run(name, l)
	}
	r := ackReq{key, group, id, expire, hook}
	l.queue = append(l.queue, r)
	if a.held == nil {
		a.held = make(map[ackRef]int)
	}
	a.held[r.ref()]++
	l.keys[key]++
	l.enq++
	if l.idle {
		l.idle = false
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// holds reports whether the ack of entry id of stream key in group is
// queued or being written: its handler returned nil, and the entry is
// still pending on the server until the XACK lands. The Backend's group
// subscriptions claim no such entry (groupSub.reserveLocked): before, a
// member's reclaim pass took an entry whose handler had run past
// AckDeadline and just returned nil, and ran it again a millisecond later,
// or with MaxDeliveries(1) dead-lettered it
// (TestAckedEventNotTakenAgainBeforeItsAck). Members of other Backends
// cannot know (pubsub.AckDeadline: a handler that runs past it may see its
// event run elsewhere).
func (a *acker) holds(key, group, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[ackRef{key, group, id}] > 0
}

// run writes lane l's acks, batch after batch, until none is queued and
// none came for ackLaneIdle (or close began), and then removes the lane.
func (a *acker) run(name string, l *ackLane) {
	defer a.wg.Done()
	idle := time.NewTimer(ackLaneIdle)
	defer idle.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for len(l.queue) > 0 {
			batch := l.queue
			l.queue = nil
			a.mu.Unlock()
			lost := a.write(batch)
			for _, r := range batch {
				if r.hook != nil {
					r.hook.Fire()
				}
			}
			a.mu.Lock()
			if len(lost) > 0 {
				if len(l.lost) == maxLostSpans {
					l.lost = l.lost[1:]
				}
				l.lost = append(l.lost, lostSpan{l.written, l.written + uint64(len(batch)), lost})
			}
			for _, r := range batch {
				if a.held[r.ref()]--; a.held[r.ref()] <= 0 {
					delete(a.held, r.ref())
				}
				if l.keys[r.key]--; l.keys[r.key] <= 0 {
					delete(l.keys, r.key)
				}
			}
			l.written += uint64(len(batch))
			close(l.progress)
			l.progress = make(chan struct{})
		}
		if a.closed {
			break
		}
		l.idle = true
		a.mu.Unlock()
		idle.Reset(ackLaneIdle)
		var expired bool
		select {
		case <-l.wake:
		case <-idle.C:
			expired = true
		case <-a.quit:
		}
		a.mu.Lock()
		l.idle = false
		if len(l.queue) == 0 && (expired || a.closed) {
			break
		}
	}
	delete(a.lanes, name) // nothing queued or being written: written == enq
}

// flush waits until every ack queued before the call is finished (written,
// or given up on), or with key set, every ack queued before the call in the
// lanes holding acks of stream key; it returns ctx.Err() when ctx ends
// first, and an error when one of those acks (of key, with key set) was
// given up on (TestReviewH66FlushReportsAckGivenUp: Flush returned nil
// with the entry pending). A lane that finished everything queued before
// the call no longer exists, or has written at least that much.
func (a *acker) flush(ctx context.Context, key string) error {
	type wait struct {
		l            *ackLane
		from, target uint64
	}
	var ws []wait
	a.mu.Lock()
	for _, l := range a.lanes {
		if key == "" || l.keys[key] > 0 {
			ws = append(ws, wait{l, l.written, l.enq})
		}
	}
	a.mu.Unlock()
	for _, w := range ws {
		for {
			a.mu.Lock()
			done, ch := w.l.written >= w.target, w.l.progress
			a.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range ws {
		for _, sp := range w.l.lost {
			if sp.from < w.target && sp.to > w.from && (key == "" || sp.keys[key]) {
				return errAcksGivenUp
			}
		}
	}
	return nil
}

// errAcksGivenUp is what flush returns when acks it waited for were given
// up on.
var errAcksGivenUp = errors.New("redisstreams: acks were not written (refused by Redis, see the log); their entries stay pending and are redelivered after their ack deadline")

// close stops taking acks and waits for the lanes to write what they hold,
// for ackCloseGrace at most: then their writes are cancelled and the acks
// left are given up on (their entries are redelivered after their
// AckDeadline), and close returns an error that says how many
// (TestReviewH66CloseReportsAcksGivenUp: Close returned nil with a handled
// entry left pending).
func (a *acker) close() error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.quit)
	}
	a.mu.Unlock()
	defer a.cancel()
	giveUp := time.AfterFunc(ackCloseGrace, a.cancel)
	defer giveUp.Stop()
	a.wg.Wait()
	a.mu.Lock()
	n := a.abandoned
	a.mu.Unlock()
	if n > 0 {
		return fmt.Errorf("redisstreams: %d acks not written within %v of Close; their entries stay pending and are redelivered after their ack deadline", n, ackCloseGrace)
	}
	return nil
}

// write sends batch, retrying failed XACKs with backoff: until they are
// written or the acker's close gives up on them, except those refused with
// an error reply that stays (ackRetryable), given up after nine tries. An
// ack that cannot be written leaves its entry pending: it is redelivered
// after the ack deadline (at-least-once), never lost. The acks of a stream and
// group with an expiry (pubsub.ExpireWhenDrained) go as one
// delete_drained.lua call, which sets the expiry when they leave the stream
// drained.
func (a *acker) write(batch []ackReq) (lost map[string]bool) {
	type sg struct{ key, group string }
	byStream := make(map[sg][]string)
	expire := make(map[sg]time.Duration)
	var order []sg
	for _, r := range batch {
		k := sg{r.key, r.group}
		if _, ok := byStream[k]; !ok {
			order = append(order, k)
		}
		byStream[k] = append(byStream[k], r.id)
		if r.expire > 0 {
			expire[k] = max(expire[k], r.expire)
		}
	}
	bo := newRetry()
	ctx := a.ctx
	eval := false // the server answered NOSCRIPT: send the script's body
	for try := 0; ; try++ {
		if ctx.Err() != nil {
			a.b.opts.Logger.Warn("redisstreams: closing: xack not written in time; entries stay pending and are redelivered after the ack deadline",
				"streams", len(order))
			n := 0
			for _, k := range order {
				n += len(byStream[k])
			}
			a.mu.Lock()
			a.abandoned += n
			a.mu.Unlock()
			return lost // close reports the rest
		}
		pipe := a.b.client.Pipeline()
		cmds := make([]redis.Cmder, len(order))
		for i, k := range order {
			if e := expire[k]; e > 0 {
				cmds[i] = pipe.Do(ctx, drainedAckArgs(eval, k.key, k.group, e, byStream[k])...)
			} else {
				cmds[i] = pipe.XAck(ctx, k.key, k.group, byStream[k]...)
			}
		}
		_, _ = pipe.Exec(ctx)
		var failed []sg
		var lastErr error
		noScript := true // every failure was NOSCRIPT: send again at once
		for i, k := range order {
			if err := cmds[i].Err(); err != nil && !isNoGroup(err) {
				if isNoScript(err) {
					eval = true
				} else {
					noScript = false
				}
				failed = append(failed, k)
				lastErr = err
			}
		}
		if len(failed) == 0 {
			return lost
		}
		if noScript && try == 0 {
			order = failed
			continue
		}
		if try >= 8 {
			// An error reply that stays (WRONGTYPE, NOPERM) gives up; a
			// server that cannot be reached, or says it will answer
			// later (LOADING, READONLY, ...), does not: the XACK lands
			// when it answers again, or the acker's close gives up on it
			// (TestReviewH66AckSurvivesRefusedOutage: nine fast failures
			// of a refused connection took ~10s, and the handled entry
			// ran again once Redis came back).
			var keep []sg
			var dropErr error
			for _, k := range failed {
				if err := errOf(cmds, order, k); ackRetryable(err) {
					keep = append(keep, k)
				} else {
					dropErr = err
					if lost == nil {
						lost = make(map[string]bool)
					}
					lost[k.key] = true
				}
			}
			if dropErr != nil {
				a.b.opts.Logger.Warn("redisstreams: xack failed; entries stay pending and are redelivered after the ack deadline",
					"streams", len(failed)-len(keep), "err", dropErr)
			}
			if len(keep) == 0 {
				return lost
			}
			if try == 8 {
				a.b.opts.Logger.Warn("redisstreams: xack not written yet; retrying until Redis answers or the Backend closes",
					"streams", len(keep), "err", lastErr)
			}
			failed = keep
		}
		order = failed
		wait := time.NewTimer(bo.Next())
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
		}
	}
}

// errOf returns the error of stream and group k's command in cmds (sent
// in the order of order).
func errOf[K comparable](cmds []redis.Cmder, order []K, k K) error {
	for i, o := range order {
		if o == k {
			return cmds[i].Err()
		}
	}
	return nil
}

// ackRetryable reports whether an ack that failed with err is tried again
// for as long as the acker runs: a transport error (the server cannot be
// reached, or did not answer in time) or an error reply that says to come
// back later. Other error replies (WRONGTYPE, NOPERM) are given up on after
// the acker's tries, and so is a client that was closed.
func ackRetryable(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// drainedAckArgs returns the command that acks ids of stream key in group
// and, when that leaves the stream drained, sets it to expire after expire
// (delete_drained.lua in its ack mode): EVALSHA, or with eval EVAL.
func drainedAckArgs(eval bool, key, group string, expire time.Duration, ids []string) []any {
	args := make([]any, 0, 6+len(ids))
	if eval {
		args = append(args, "eval", deleteDrainedScript.src)
	} else {
		args = append(args, "evalsha", deleteDrainedScript.sha)
	}
	args = append(args, 1, key, group, max(expire.Milliseconds(), 1))
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}
