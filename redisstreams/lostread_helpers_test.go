package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// Helpers of the lost-read tests (stall_read_test.go, lostread_*_test.go).

// readFailures returns a logger that passes every record on to next and
// signals on the channel once per "group read failed" warning (a read the
// stalled server did not answer), so a test can wait for the nth.
func readFailures(next slog.Handler) (*slog.Logger, chan struct{}) {
	fails := make(chan struct{}, 100)
	return slog.New(&signalHandler{Handler: next, msg: "redisstreams: group read failed; retrying", ch: fails}), fails
}

// countDeadLetters counts (in dead) and logs what arrives on topic's
// dead-letter topic, from a fan-out subscription that t's cleanup stops.
func countDeadLetters(t *testing.T, b *Backend, topic string, dead *atomic.Int64) {
	t.Helper()
	dsub, err := b.Subscribe(context.Background(), pubsub.DeadLetterTopic(topic), func(ctx context.Context, e pubsub.Event) error {
		dead.Add(1)
		t.Logf("dead letter: %s reason=%q", e.Type, e.Metadata[pubsub.MetaDeadReason])
		return nil
	}, pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dsub.Unsubscribe(context.Background()) })
}

// publishXs publishes n events of type "x" on topic.
func publishXs(t *testing.T, b *Backend, topic string, n int) {
	t.Helper()
	for range n {
		if err := b.Publish(context.Background(), topic, pubsub.Event{Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
}

// signalHandler sends on ch for each record whose message is msg.
type signalHandler struct {
	slog.Handler
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

// lateRig is the setup of the late-read tests: a Backend from NewURL whose
// traffic goes through a proxy that can hold a request and deliver it late
// (b; fails signals each failed group read), a Backend straight to the
// server for publishing (pub), a count of dead letters, and one
// ReadOnDemand group subscription of "t" with MaxDeliveries(1) (g) that
// records each delivery as "<data>#<attempt>".
type lateRig struct {
	t     *testing.T
	srv   *redistest.Server
	px    *redistest.Proxy
	b     *Backend
	pub   *Backend
	fails chan struct{}
	dead  atomic.Int64
	g     *groupSub

	mu  sync.Mutex
	ran []string
}

func newLateRig(t *testing.T) *lateRig {
	t.Helper()
	redistest.Require(t)
	r := &lateRig{t: t, srv: redistest.Start(t, redistest.Options{})}
	r.px = redistest.NewProxy(t, r.srv.Addr())
	ctx := context.Background()
	logger, fails := readFailures(slog.Default().Handler())
	r.fails = fails
	var err error
	if r.b, err = NewURL(ctx, "redis://"+r.px.Addr(), Options{Prefix: psPrefix(), Logger: logger}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.b.Close() })
	if r.pub, err = NewURL(ctx, r.srv.URL(), Options{Prefix: r.b.opts.Prefix}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.pub.Close() })
	countDeadLetters(t, r.pub, "t", &r.dead)
	sub, err := r.b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
		r.mu.Lock()
		r.ran = append(r.ran, fmt.Sprintf("%s#%d", e.Data, e.DeliveryAttempt))
		r.mu.Unlock()
		return nil
	}, pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest), pubsub.ReadOnDemand(),
		pubsub.MaxDeliveries(1), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	r.g = sub.(*groupSub)
	return r
}

// ranAll reports whether the deliveries so far are exactly want, in order.
func (r *lateRig) ranAll(want ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ran, " ") == strings.Join(want, " ")
}

// ranCount returns how many deliveries there were.
func (r *lateRig) ranCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ran)
}

// waitFor kicks the subscription until cond holds, failing after 20s.
func (r *lateRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.t.Fatalf("%s: not within 20s (ran %v, %d dead-lettered)", what, r.ran, r.dead.Load())
		}
		r.g.Kick()
		time.Sleep(20 * time.Millisecond)
	}
}

// publish publishes an event with data to "t", straight to the server.
func (r *lateRig) publish(data string) {
	r.t.Helper()
	if err := r.pub.Publish(context.Background(), "t", pubsub.Event{Type: "x", Data: []byte(data)}); err != nil {
		r.t.Fatal(err)
	}
}

// holdNextRead has the proxy hold the next group read (every read pipeline
// carries an XLEN), kicks the subscription and waits until that read
// failed (go-redis's ReadTimeout).
func (r *lateRig) holdNextRead() {
	r.t.Helper()
	r.px.HoldNext(func(b []byte) bool { return strings.Contains(strings.ToUpper(string(b)), "XLEN") })
	r.g.Kick()
	select {
	case <-r.fails:
	case <-time.After(20 * time.Second):
		r.t.Fatal("the held read did not fail within 20s")
	}
}

// waitChecksEnded waits until the lost-read checks ended.
func (r *lateRig) waitChecksEnded() {
	r.t.Helper()
	r.waitFor("lost-read checks ended", func() bool {
		r.g.mu.Lock()
		defer r.g.mu.Unlock()
		return !r.g.suspect
	})
}

// result returns the deliveries so far, joined.
func (r *lateRig) result() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ran, " ")
}
