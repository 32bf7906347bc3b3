package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// h75Counter is a slog.Handler that counts the records it gets (the
// backend's warnings), so that a test can tell a read loop that spins on
// an error from one that backs off.
type h75Counter struct{ n *atomic.Int64 }

func (h h75Counter) Enabled(context.Context, slog.Level) bool  { return true }
func (h h75Counter) Handle(context.Context, slog.Record) error { h.n.Add(1); return nil }
func (h h75Counter) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h h75Counter) WithGroup(string) slog.Handler             { return h }

// h75Deliveries records, per subscription, how often each event id came.
type h75Deliveries struct {
	mu    sync.Mutex
	got   map[string]int
	first map[string]time.Time
}

func newH75Deliveries() *h75Deliveries {
	return &h75Deliveries{got: map[string]int{}, first: map[string]time.Time{}}
}

func (d *h75Deliveries) handler(_ context.Context, e pubsub.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.got[e.ID] == 0 {
		d.first[e.ID] = time.Now()
	}
	d.got[e.ID]++
	return nil
}

// missing returns the ids of want not delivered yet, and those delivered
// more than once.
func (d *h75Deliveries) check(want []string) (missing, twice []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range want {
		switch n := d.got[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, id)
		}
	}
	return missing, twice
}

// TestReviewH75WipedServerUnderLoad: Redis loses everything (a restart
// without persistence, or FLUSHALL) while events are published steadily to
// a topic with a fan-out subscription on each of two Backends (NewURL, as
// a user builds them) and a group with a member on each. Every event whose
// Publish began after the wipe must reach the group once and each fan-out
// subscription once, within a bounded time; the read loops must not spin
// on the errors the wipe causes; Unsubscribe must return promptly after.
func TestReviewH75WipedServerUnderLoad(t *testing.T) {
	for _, how := range []string{"Restart", "FlushAll"} {
		t.Run(how, func(t *testing.T) { h75WipedUnderLoad(t, how) })
	}
}

func h75WipedUnderLoad(t *testing.T, how string) {
	srv := redistest.Start(t, redistest.Options{})
	var warns atomic.Int64
	o := Options{Prefix: psPrefix(), Logger: slog.New(h75Counter{&warns})}
	a := urlBackend(t, srv.URL(), o)
	b := urlBackend(t, srv.URL(), o)
	const topic = "wiped"
	fanA, fanB, grp := newH75Deliveries(), newH75Deliveries(), newH75Deliveries()
	var subs []pubsub.Subscription
	for _, s := range []struct {
		be *Backend
		h  pubsub.Handler
		o  []pubsub.SubscribeOption
	}{
		{a, fanA.handler, nil},
		{b, fanB.handler, nil},
		{a, grp.handler, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(4)}},
		{b, grp.handler, []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.Concurrency(4)}},
	} {
		sub, err := s.be.Subscribe(t.Context(), topic, s.h, s.o...)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		subs = append(subs, sub)
	}

	var (
		mu      sync.Mutex
		wipedAt time.Time // zero until the wipe is over
		after   []string  // ids whose Publish began after the wipe and returned nil
		sent    = map[string]time.Time{}
	)
	stop := make(chan struct{})
	var pubs sync.WaitGroup
	for w := range 4 {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				post := !wipedAt.IsZero()
				mu.Unlock()
				id := fmt.Sprintf("w%d-%d", w, i)
				began := time.Now()
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				err := a.Publish(ctx, topic, pubsub.Event{ID: id, Type: "t"})
				cancel()
				if err != nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if post {
					mu.Lock()
					after = append(after, id)
					sent[id] = began
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		pubs.Wait()
	}()

	time.Sleep(time.Second)
	switch how {
	case "Restart":
		srv.Kill(t)
		srv.Restart(t)
	case "FlushAll":
		c := srv.Client(t)
		if err := c.FlushAll(t.Context()).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
	}
	wiped := time.Now()
	warnsAtWipe := warns.Load()
	mu.Lock()
	wipedAt = wiped
	mu.Unlock()
	time.Sleep(3 * time.Second)
	close(stop)
	pubs.Wait()

	mu.Lock()
	want := append([]string(nil), after...)
	mu.Unlock()
	if len(want) < 100 {
		t.Fatalf("only %d events published after the wipe", len(want))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var missing [3][]string
		var twice [3][]string
		done := true
		for i, d := range []*h75Deliveries{fanA, fanB, grp} {
			missing[i], twice[i] = d.check(want)
			if len(missing[i]) > 0 {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			for i, name := range []string{"fan-out on A", "fan-out on B", "group"} {
				if len(missing[i]) > 0 {
					t.Errorf("%s: %d of %d events published after the wipe not delivered within 20s, e.g. %v", name, len(missing[i]), len(want), missing[i][:min(5, len(missing[i]))])
				}
				if len(twice[i]) > 0 {
					t.Errorf("%s: %d events published after the wipe delivered more than once, e.g. %v", name, len(twice[i]), twice[i][:min(5, len(twice[i]))])
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// How late the first events after the wipe came (the recovery time).
	var worst time.Duration
	for _, d := range []*h75Deliveries{fanA, fanB, grp} {
		d.mu.Lock()
		for _, id := range want {
			if f, ok := d.first[id]; ok && f.Sub(sent[id]) > worst {
				worst = f.Sub(sent[id])
			}
		}
		d.mu.Unlock()
	}
	t.Logf("%s: %d events published after the wipe; slowest delivery %v after its Publish began; %d warnings logged after the wipe", how, len(want), worst, warns.Load()-warnsAtWipe)
	if n := warns.Load() - warnsAtWipe; n > 200 {
		t.Errorf("%d warnings logged in the 3s after the wipe: a read loop spins", n)
	}
	for i, sub := range subs {
		began := time.Now()
		if err := sub.Unsubscribe(t.Context()); err != nil {
			t.Errorf("Unsubscribe %d: %v", i, err)
		}
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("Unsubscribe %d took %v", i, d)
		}
	}
}
