package signals_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// slowInbox delays every publish of a signal into a thread's inbox.
type slowInbox struct {
	*redisstreams.Backend
	d time.Duration
}

func (s slowInbox) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	time.Sleep(s.d)
	return s.Backend.PublishBatch(ctx, ps)
}

func (s slowInbox) PublishFor(ctx context.Context, topic, group string, e pubsub.Event) error {
	if strings.HasPrefix(topic, "signals.thread.") {
		time.Sleep(s.d)
	}
	return s.Backend.PublishFor(ctx, topic, group, e)
}

// TestWokeTenureWaitsForItsSignal: Send takes the lease before it stores
// the signal. A tenure started that way must not end (its first wait
// passed, nothing read) while the Send is still storing the signal: the
// signal's notice says Woke, which keeps every handler off the lease for a
// recovery interval (5s here), so a tenure that ended early would leave the
// signal waiting that long. The inbox publish takes 600ms, longer than the
// tenure's first wait (a quarter of the 800ms TTL + 100ms, linger 10ms).
func TestWokeTenureWaitsForItsSignal(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ran := make(chan time.Time, 1)
	rt := newRuntime(t, slowInbox{b, 600 * time.Millisecond}, func(ctx context.Context, run *signals.Run) error {
		ran <- time.Now()
		return nil
	}, signals.WithLeaseTTL(800*time.Millisecond), signals.WithLinger(10*time.Millisecond),
		signals.WithRecoveryInterval(5*time.Second))
	start := time.Now()
	acc, err := rt.Send(context.Background(), "w", sig("s1"))
	if err != nil || acc.Action != signals.Woke {
		t.Fatalf("Send: %+v, %v; want Woke", acc, err)
	}
	select {
	case at := <-ran:
		// The bound is the promise: no recovery interval (5s) waited.
		if d := at.Sub(start); d > 3*time.Second {
			t.Errorf("signal ran %v after Send began, want it without waiting the 5s recovery interval", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("signal did not run within 10s")
	}
}

// noticeFails publishes as redisstreams does on a Cluster (the inbox entry,
// then the notice) and fails the notices while fail is set.
type noticeFails struct {
	*redisstreams.Backend
	fail atomic.Bool
}

var errNoticeInjected = errors.New("notice publish failed (injected)")

func (n *noticeFails) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	for _, p := range ps {
		var err error
		switch {
		case p.Topic == signals.WorkTopic && n.fail.Load():
			err = errNoticeInjected
		case p.Group != "":
			err = n.Backend.PublishFor(ctx, p.Topic, p.Group, p.Event)
		default:
			err = n.Backend.Publish(ctx, p.Topic, p.Event)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestStoredSignalRunsWhenNoticeFails: when the inbox entry was stored and
// only the notice failed, Send returns the error, but the local tenure is
// still told to read: the signal runs (nothing else would announce it).
func TestStoredSignalRunsWhenNoticeFails(t *testing.T) {
	_, c := startRedis(t)
	b, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ps := &noticeFails{Backend: b}
	ran := make(chan string, 4)
	ended := make(chan struct{}, 4)
	rt := newRuntime(t, ps, func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		return nil
	}, signals.WithLinger(time.Minute), signals.WithObserver(func(e signals.Event) {
		if e.Kind == signals.RunEnded {
			ended <- struct{}{}
		}
	}))
	if _, err := rt.Send(context.Background(), "k", sig("s0")); err != nil {
		t.Fatal(err)
	}
	if id := <-ran; id != "s0" {
		t.Fatalf("ran %s, want s0", id)
	}
	<-ended // the tenure lingers idle, its inbox read to the end
	ps.fail.Store(true)
	acc, err := rt.Send(context.Background(), "k", sig("s1"))
	if !errors.Is(err, errNoticeInjected) {
		t.Fatalf("Send with a failing notice: %+v, %v; want the notice's error", acc, err)
	}
	select {
	case id := <-ran:
		if id != "s1" {
			t.Fatalf("ran %s, want s1", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stored signal did not run within 10s: its tenure was not told to read")
	}
}
