package redisstreams

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
)

// Review AA (item 3). publishDead counts a dead letter the replicas did not
// acknowledge as stored on a *redis.Client, arguing that "the failed
// entry's ack reaches the replicas after it, so a failover that loses the
// one loses the other". Two ways that argument does not hold.

// TestReviewAADeadLetterFanOutLostInFailover: a fan-out subscription has
// no ack to lose with the dead letter. Its handler fails e1 (MaxDeliveries
// 1) while replication stalls; the dead letter, stored on the master only,
// counts as stored, and the subscription moves on. The master is killed
// and a replica that lacks the dead letter is promoted: the dead letter is
// gone, and nothing ever publishes it again (before 16c88fb the failed
// dead letter made Handle return an error, and the fan-out subscription
// redelivered e1 until a dead letter was stored). Asserted, as
// TestDeadLetterUnsyncedLostInFailover asserts for a group: within 30s
// the promoted master holds a dead letter of e1.
func TestReviewAADeadLetterFanOutLostInFailover(t *testing.T) {
	const topic = "aa-dead-fanout"
	d := startDeadStall(t, topic, nil)
	sub, err := d.b.Subscribe(t.Context(), topic, d.handler(t), pubsub.MaxDeliveries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	d.publishAndAwaitStall(t, topic)
	master := d.st.Master().Client(t)
	deadline := time.Now().Add(1500 * time.Millisecond)
	var lostID string
	for {
		if ids := deadLetters(t, master, d.deadKey, "e1"); len(ids) == 1 {
			lostID = ids[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("premise: 1.5s after the stall the master holds no dead letter of e1")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Let the subscription take the unsynced dead letter as stored (its
	// WAIT ends after PublishSyncTimeout).
	time.Sleep(400 * time.Millisecond)
	promoted, start := d.failover(t)
	d.awaitDeadAgain(t, promoted, "", lostID, start)
}

// ackGate is a go-redis hook that stops the first pipeline holding an
// XACK of key, once armed, until release is closed: it stands for the
// moment between the dead letter's WAIT and the ack, in which the master
// crashes (the acker's XACK then fails on the dead master and is retried,
// with backoff, for several seconds: the retry goes to whatever master the
// client finds then).
type ackGate struct {
	key     string
	dead    string // the dead-letter stream: a script ack names it too
	armed   atomic.Bool
	fired   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func (g *ackGate) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook holds a script call on key too: an ack that is not a plain
// XACK (a fix may make it conditional).
func (g *ackGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		g.hold(c)
		return next(ctx, c)
	}
}

func (g *ackGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if g.hold(c) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// hold waits for release when c is the first ack of key since armed.
func (g *ackGate) hold(c redis.Cmder) bool {
	if !g.armed.Load() {
		return false
	}
	args := c.Args()
	match := false
	switch strings.ToLower(c.Name()) {
	case "xack":
		match = len(args) > 1 && args[1] == g.key
	case "evalsha", "eval":
		match = len(args) > 4 && args[3] == g.key && args[4] == g.dead
	}
	if !match || !g.fired.CompareAndSwap(false, true) {
		return false
	}
	close(g.reached)
	<-g.release
	return true
}

// TestReviewAADeadLetterAckAfterFailover: on a group, the ack is a write of
// its own, sent by the acker after the dead letter's WAIT returned. When
// the master dies between the two, the ack does not reach it: the acker
// retries, and its retry reaches the promoted master, which has e1 pending
// (its read was synced) but not the dead letter. e1 is acked there with no
// dead letter anywhere: lost. Here the master is killed while the XACK of
// e1 is about to be sent (held by a hook until the promotion, which the
// acker's own retries, 8 over ~4.5s plus go-redis's, can span as well).
// Asserted as in TestDeadLetterUnsyncedLostInFailover: within 30s (the
// ack deadline is 10s) the promoted master holds a dead letter of e1 and
// nothing pending.
func TestReviewAADeadLetterAckAfterFailover(t *testing.T) {
	const topic = "aa-dead-ack"
	gate := &ackGate{reached: make(chan struct{}), release: make(chan struct{})}
	d := startDeadStall(t, topic, gate)
	gate.key, gate.dead = d.key, d.deadKey
	d.onStall = func() { gate.armed.Store(true) }
	// An ack deadline longer than the failover (the default is 30s): with
	// 1s, the promoted master's e1 is taken over and dead-lettered again
	// while the ack is held, before it lands.
	const ackDeadline = 10 * time.Second
	sub, err := d.b.Subscribe(t.Context(), topic, d.handler(t), pubsub.Group("g"), pubsub.MaxDeliveries(1), pubsub.AckDeadline(ackDeadline))
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(gate.release)
		}
		_ = sub.Unsubscribe(context.Background())
	}()
	d.publishAndAwaitStall(t, topic)
	select {
	case <-gate.reached:
	case <-time.After(5 * time.Second):
		t.Fatal("premise: no ack of e1 within 5s of the stall (the dead letter did not count as stored)")
	}
	master := d.st.Master().Client(t)
	ids := deadLetters(t, master, d.deadKey, "e1")
	if len(ids) != 1 || groupPending(t, master, d.key, "g") != 1 {
		t.Fatalf("premise: the master holds dead letters %v of e1, want 1, and e1 pending", ids)
	}
	promoted, start := d.failover(t)
	released = true
	close(gate.release)
	// Were e1 acked on the promoted master, which never had its dead
	// letter, it would be lost: nothing pending and no dead letter.
	d.awaitDeadAgain(t, promoted, "g", ids[0], start)
}
