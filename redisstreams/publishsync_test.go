package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestPublishSyncOptions: bad PublishSyncReplicas and PublishSyncTimeout,
// and PublishSyncReplicas on a client that is neither a *redis.Client nor a
// *redis.ClusterClient, return an error wrapping ErrInvalid that names the
// field and the value (or the client's type); a zero timeout means
// DefaultPublishSyncTimeout.
func TestPublishSyncOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { ring.Close() })
	quick := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { quick.Close() })
	type wrapped struct{ *redis.Client } // a UniversalClient of the caller's own
	replicaReads := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, RouteRandomly: true})
	t.Cleanup(func() { replicaReads.Close() })
	for _, tc := range []struct {
		client redis.UniversalClient
		o      Options
		want   []string
	}{
		{c, Options{PublishSyncReplicas: -1}, []string{"PublishSyncReplicas", "-1"}},
		{c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: -time.Second}, []string{"PublishSyncTimeout", "-1s"}},
		{c, Options{PublishSyncTimeout: -time.Millisecond}, []string{"PublishSyncTimeout", "-1ms"}},
		{c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: time.Microsecond}, []string{"PublishSyncTimeout", "1µs"}},
		{ring, Options{PublishSyncReplicas: 1}, []string{"PublishSyncReplicas", "*redis.Ring"}},
		{wrapped{c}, Options{PublishSyncReplicas: 2}, []string{"PublishSyncReplicas", "2", "wrapped"}},
		// Reads from a lagging replica could take an entry for deleted.
		{replicaReads, Options{PublishSyncReplicas: 1}, []string{"PublishSyncReplicas", "ReadOnly true", "RouteRandomly true"}},
		// A WAIT outlasting the read deadline would be retried with its
		// publishes.
		{quick, Options{PublishSyncReplicas: 1}, []string{"PublishSyncTimeout", "1s", "ReadTimeout", "500ms"}},
		{c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: 5 * time.Second}, []string{"PublishSyncTimeout", "5s", "ReadTimeout", "5s"}},
	} {
		_, err := New(tc.client, tc.o)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%T, %+v) = %v, want ErrInvalid", tc.client, tc.o, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%T, PublishSyncReplicas %d, PublishSyncTimeout %v) = %q, want it to name %q",
					tc.client, tc.o.PublishSyncReplicas, tc.o.PublishSyncTimeout, err, w)
			}
		}
	}
	// Without the option, any client will do.
	if b, err := New(ring, Options{PublishSyncTimeout: time.Second}); err != nil {
		t.Errorf("New(ring, PublishSyncReplicas 0) = %v, want nil", err)
	} else {
		b.Close()
	}
	b, err := New(c, Options{PublishSyncReplicas: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.opts.PublishSyncTimeout != DefaultPublishSyncTimeout {
		t.Errorf("PublishSyncTimeout 0 became %v, want DefaultPublishSyncTimeout (%v)", b.opts.PublishSyncTimeout, DefaultPublishSyncTimeout)
	}
}

// publishAPIs are the three ways to publish, each given an event to
// publish on topic: Publish, PublishBatch (ev and a second event, their
// ids ev.ID and ev.ID+"+"), and PublishFor (group "g"). n is how many
// events a call stores.
var publishAPIs = []struct {
	name string
	n    int
	call func(ctx context.Context, b *Backend, topic string, ev pubsub.Event) error
}{
	{"Publish", 1, func(ctx context.Context, b *Backend, topic string, ev pubsub.Event) error {
		return b.Publish(ctx, topic, ev)
	}},
	{"PublishBatch", 2, func(ctx context.Context, b *Backend, topic string, ev pubsub.Event) error {
		ev2 := ev
		ev2.ID += "+"
		return b.PublishBatch(ctx, []pubsub.Publication{{Topic: topic, Event: ev}, {Topic: topic, Event: ev2}})
	}},
	{"PublishFor", 1, func(ctx context.Context, b *Backend, topic string, ev pubsub.Event) error {
		return b.PublishFor(ctx, topic, "g", ev)
	}},
}

// streamEventIDs returns the Event.IDs in the stream key on the node at
// addr (asked directly, whatever its role).
func streamEventIDs(t testing.TB, addr, key string) map[string]bool {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s on %s: %v", key, addr, err)
	}
	ids := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		id, _ := m.Values[fieldID].(string)
		ids[id] = true
	}
	return ids
}

// awaitSynced publishes on topic until a publish succeeds (the replica may
// still be attaching right after the start), at most redistest.ReadyTimeout.
func awaitSynced(t *testing.T, b *Backend, topic string) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		err := b.Publish(t.Context(), topic, pubsub.Event{Type: "warmup"})
		if err == nil {
			return
		}
		if time.Since(start) > redistest.ReadyTimeout {
			t.Fatalf("Publish with a live replica: %v; want nil", err)
		}
	}
}

// TestPublishSyncReachesReplica: on a master with one replica and
// PublishSyncReplicas 1, 16 goroutines publish 200 times each (so that
// publishes are coalesced into batches), each to a topic of its own, by each
// of Publish, PublishBatch and PublishFor; right after every call that
// returned nil the goroutine reads the stream's length on the replica
// (XLEN, asked of the replica directly, without waiting): it holds every
// event accepted so far. A publish alone is one round trip (the XADD and
// WAIT in one pipeline).
func TestPublishSyncReachesReplica(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	replica := redis.NewClient(&redis.Options{Addr: replicaOf(t, st).Addr()})
	t.Cleanup(func() { replica.Close() })
	var trips redistest.RoundTrips
	c := st.Client(t)
	c.AddHook(&trips)
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, Logger: slog.New(slog.DiscardHandler)})
	awaitSynced(t, b, "warmup")

	trips.Reset()
	if err := b.Publish(t.Context(), "alone", pubsub.Event{Type: "t"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := trips.N(); n != 1 {
		t.Errorf("a Publish alone took %d round trips, want 1 (XADD and WAIT in one pipeline)", n)
	}

	const goroutines, calls = 16, 200
	for _, api := range publishAPIs {
		t.Run(api.name, func(t *testing.T) {
			trips.Reset()
			var accepted, failed, missing atomic.Int64
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					topic := fmt.Sprintf("%s-%d", api.name, g)
					key := b.keys.Stream(topic)
					var mine int64
					for i := range calls {
						ev := pubsub.Event{ID: fmt.Sprintf("%d-%d", g, i), Type: "t"}
						if err := api.call(t.Context(), b, topic, ev); err != nil {
							failed.Add(1)
							t.Logf("%s %s: %v", api.name, ev.ID, err)
							continue
						}
						mine += int64(api.n)
						accepted.Add(1)
						n, err := replica.XLen(t.Context(), key).Result()
						if err != nil {
							t.Errorf("XLEN %s on the replica: %v", key, err)
							return
						}
						if n < mine {
							missing.Add(1)
							t.Errorf("%s of %s returned nil, but the replica holds %d of the %d events accepted on the stream", api.name, ev.ID, n, mine)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%d calls accepted, %d failed, %d accepted but not on the replica; %d round trips to the master (with the replica's reads: not all are publishes)",
				accepted.Load(), failed.Load(), missing.Load(), trips.N())
			if accepted.Load() < goroutines*calls/2 {
				t.Errorf("only %d of %d calls accepted with a live replica", accepted.Load(), goroutines*calls)
			}
		})
	}
}

// TestPublishSyncReplicaStopped: with the only replica stopped (SIGSTOP),
// each of Publish, PublishBatch and PublishFor returns an error wrapping
// ErrNotReplicated, naming 0 of 1 replicas and the timeout, within
// PublishSyncTimeout and a generous slack, and its events are stored on the
// master; once the replica is resumed (SIGCONT) publishes succeed again.
func TestPublishSyncReplicaStopped(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	const timeout = 200 * time.Millisecond
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
	awaitSynced(t, b, "stopped")
	node := replicaOf(t, st)
	node.Pause(t)
	paused := true
	defer func() {
		if paused {
			node.Resume(t)
		}
	}()
	for _, api := range publishAPIs {
		id := api.name + "-stopped"
		start := time.Now()
		err := api.call(t.Context(), b, "stopped", pubsub.Event{ID: id, Type: "t"})
		took := time.Since(start)
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s with the replica stopped = %v, want ErrNotReplicated", api.name, err)
		}
		if want := "0 of 1 replicas"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), timeout.String()) {
			t.Errorf("%s: error %q does not say %q and the timeout %v", api.name, err, want, timeout)
		}
		if took < timeout || took > timeout+5*time.Second {
			t.Errorf("%s took %v, want about PublishSyncTimeout (%v)", api.name, took, timeout)
		}
		if ids := streamEventIDs(t, st.Master().Addr(), b.keys.Stream("stopped")); !ids[id] || (api.n == 2 && !ids[id+"+"]) {
			t.Errorf("%s: event %s not stored on the master after ErrNotReplicated", api.name, id)
		}
		t.Logf("%s with the replica stopped: %v after %v", api.name, err, took)
	}
	node.Resume(t)
	paused = false
	awaitSynced(t, b, "stopped")
	for _, api := range publishAPIs {
		if err := api.call(t.Context(), b, "stopped", pubsub.Event{ID: api.name + "-resumed", Type: "t"}); err != nil {
			t.Errorf("%s with the replica resumed = %v, want nil", api.name, err)
		}
	}
}

// TestPublishSyncFailover: Sentinel with one replica, publishers on a
// failover client of go-redis's defaults. The replica is stopped and its
// link cut on the master (CLIENT KILL TYPE replica), publishes go on for a
// moment (the master alone takes them), then the master is killed and the
// replica resumed right after (Sentinel.FailoverAfterKill), so that it
// cannot fetch what it missed, and promoted: the writes the master alone
// took are lost, as in a failover that deposes a master which took writes
// its replicas never got. With PublishSyncReplicas 1, every event whose publish
// returned nil is on the promoted master, and publishes after the failover
// fail with ErrNotReplicated (no replica is left: the documented cost). The
// variant with PublishSyncReplicas 0 only logs how many accepted events
// the failover lost.
func TestPublishSyncFailover(t *testing.T) {
	for _, replicas := range []int{1, 0} {
		t.Run(fmt.Sprintf("PublishSyncReplicas=%d", replicas), func(t *testing.T) {
			publishSyncFailover(t, replicas)
		})
	}
}

func publishSyncFailover(t *testing.T, replicas int) {
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: replicas, PublishSyncTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if replicas > 0 {
		awaitSynced(t, b, "failover")
	}
	const publishers = 4
	var (
		mu        sync.Mutex
		accepted  []string
		attempts  atomic.Int64
		notRepl   atomic.Int64 // ErrNotReplicated after the failover
		lateOK    atomic.Int64 // nil after the failover
		afterFail atomic.Bool
		otherErrs atomic.Int64
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		acceptedN = func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
		waitUntil = func(what string, ok func() bool) {
			t.Helper()
			for deadline := time.Now().Add(redistest.FailoverTimeout); !ok(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("waiting for %s: timed out", what)
				}
			}
		}
	)
	for g := range publishers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%d-%d", g, i)
				err := b.Publish(context.Background(), "failover", pubsub.Event{ID: id, Type: "t"})
				attempts.Add(1)
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, id)
					mu.Unlock()
					if afterFail.Load() {
						lateOK.Add(1)
					}
				case afterFail.Load() && errors.Is(err, ErrNotReplicated):
					notRepl.Add(1)
				default:
					otherErrs.Add(1)
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitUntil("200 accepted publishes", func() bool { return acceptedN() >= 200 })

	// Leave the master alone with the writes: the replica stopped, so that
	// it cannot reconnect, and its link cut.
	resume := st.StallReplication(t)
	before, acceptedBefore := attempts.Load(), acceptedN()
	waitUntil("publishes on the master alone", func() bool { return attempts.Load() >= before+8 })
	acceptedAlone := acceptedN() - acceptedBefore
	// Resumed once the master is dead: it cannot fetch what it missed.
	st.FailoverAfterKill(t, resume)
	afterFail.Store(true)
	if replicas > 0 {
		waitUntil("a publish failing with ErrNotReplicated after the failover", func() bool { return notRepl.Load() > 0 })
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close

	ids := streamEventIDs(t, st.Master().Addr(), b.keys.Stream("failover"))
	mu.Lock()
	defer mu.Unlock()
	var lost []string
	for _, id := range accepted {
		if !ids[id] {
			lost = append(lost, id)
		}
	}
	t.Logf("PublishSyncReplicas %d: %d publishes accepted (%d while the master was alone), %d accepted after the failover, %d failed with ErrNotReplicated after it, %d other errors; %d accepted events not on the promoted master %v",
		replicas, len(accepted), acceptedAlone, lateOK.Load(), notRepl.Load(), otherErrs.Load(), len(lost), lost[:min(len(lost), 10)])
	if replicas == 0 {
		return // measured, not asserted
	}
	if len(lost) > 0 {
		t.Errorf("%d events whose Publish returned nil are not on the promoted master (first %v)", len(lost), lost[:min(len(lost), 10)])
	}
	if lateOK.Load() > 0 {
		t.Errorf("%d publishes returned nil after the failover, with no replica left", lateOK.Load())
	}
}

// TestPublishSyncClusterNoReplica: on a Cluster of 3 masters without
// replicas (all redistest.StartCluster offers) and PublishSyncReplicas 1,
// every publish — Publish, PublishBatch and PublishFor on a topic of each
// master, and one batch whose streams are on all three masters, sent as
// one unit (as PublishBatch sends one slot's streams, or a fresh client's
// batch of several masters) — returns an error wrapping ErrNotReplicated
// naming its master, after about PublishSyncTimeout, and its event is
// stored on its master.
func TestPublishSyncClusterNoReplica(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	const timeout = 200 * time.Millisecond
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	// A topic on each master.
	topicOf := map[string]string{} // master address → topic
	for i := 0; len(topicOf) < 3 && i < 1000; i++ {
		topic := fmt.Sprint("t", i)
		node, err := c.MasterForKey(ctx, b.keys.Stream(topic))
		if err != nil {
			t.Fatal(err)
		}
		if addr := node.Options().Addr; topicOf[addr] == "" {
			topicOf[addr] = topic
		}
	}
	if len(topicOf) < 3 {
		t.Fatalf("topics on %d masters, want 3", len(topicOf))
	}
	check := func(what, addr, topic, id string, err error, took time.Duration) {
		t.Helper()
		if !errors.Is(err, ErrNotReplicated) {
			t.Errorf("%s on master %s = %v, want ErrNotReplicated", what, addr, err)
			return
		}
		if !strings.Contains(err.Error(), "0 of 1 replicas of master "+addr) {
			t.Errorf("%s: error %q does not name 0 of 1 replicas of master %s", what, err, addr)
		}
		if took < timeout || took > timeout+5*time.Second {
			t.Errorf("%s took %v, want about PublishSyncTimeout (%v)", what, took, timeout)
		}
		if !streamEventIDs(t, addr, b.keys.Stream(topic))[id] {
			t.Errorf("%s: event %s not stored on master %s", what, id, addr)
		}
	}
	for addr, topic := range topicOf {
		for _, api := range publishAPIs {
			id := api.name + "-" + topic
			start := time.Now()
			err := api.call(ctx, b, topic, pubsub.Event{ID: id, Type: "t"})
			check(api.name, addr, topic, id, err, time.Since(start))
		}
	}

	// One unit over the three masters.
	var reqs []*pubReq
	var addrs, topics []string
	for addr, topic := range topicOf {
		fields, err := b.encodeFor(topic, pubsub.Event{ID: "spanning-" + topic, Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, &pubReq{key: b.keys.Stream(topic), fields: fields})
		addrs, topics = append(addrs, addr), append(topics, topic)
	}
	reqs[0].then = reqs[1:]
	start := time.Now()
	err := b.bus.publishUnit(ctx, reqs[0])
	took := time.Since(start)
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("a unit over 3 masters = %v, want ErrNotReplicated", err)
	}
	for i, r := range reqs {
		check(fmt.Sprintf("request %d of the unit over 3 masters", i), addrs[i], topics[i], "spanning-"+topics[i], r.err, took)
	}
	t.Logf("a unit over 3 masters, each waiting for its replica up to %v (concurrently): %v", timeout, took)
}

// BenchmarkPublishSync measures what PublishSyncReplicas costs: Publish on a
// master with one replica (redistest's Sentinel deployment, a plain client
// on the master), without and with the option, one publisher and 16
// concurrent publishers (the sub-benchmarks alternate, in one run).
func BenchmarkPublishSync(b *testing.B) {
	st := redistest.StartSentinel(b, 1)
	c := redis.NewClient(&redis.Options{Addr: st.Master().Addr()})
	b.Cleanup(func() { c.Close() })
	ev := pubsub.Event{Type: "bench", Data: []byte("0123456789abcdef0123456789abcdef")}
	for _, par := range []int{1, 16} {
		for _, replicas := range []int{0, 1} {
			b.Run(fmt.Sprintf("publishers=%d/PublishSyncReplicas=%d", par, replicas), func(b *testing.B) {
				be, err := New(c, Options{Prefix: psPrefix(), PublishSyncReplicas: replicas, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { be.Close() })
				var failed atomic.Int64
				b.ResetTimer()
				if par == 1 {
					for range b.N {
						if err := be.Publish(context.Background(), "bench", ev); err != nil {
							failed.Add(1)
						}
					}
				} else {
					b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := be.Publish(context.Background(), "bench", ev); err != nil {
								failed.Add(1)
							}
						}
					})
				}
				if n := failed.Load(); n > 0 {
					b.Errorf("%d publishes failed", n)
				}
			})
		}
	}
}

// TestPublishSyncReadWaits: with PublishSyncReplicas, a group
// subscription's read ends with WAIT too, and what a read the replicas did
// not acknowledge delivered is not handed on: with the one replica paused,
// an event published before the pause reaches no handler (plain or
// on-demand subscription); once the replica resumes, each handler gets it,
// as a first delivery. Otherwise a failover could make a delivered event
// look undelivered, and deliver it again with DeliveryAttempt 1 (the
// signals runtime's Redelivered false: TestSentinelLostReadRunsAgain in
// signals/loadtest).
func TestPublishSyncReadWaits(t *testing.T) {
	st := redistest.StartSentinel(t, 1)
	b := psBackend(t, st.Client(t), Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	for _, onDemand := range []bool{false, true} {
		topic := fmt.Sprint("readwait-", onDemand)
		awaitSynced(t, b, topic)
		if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		replica := replicaOf(t, st)
		replica.Pause(t)
		got := make(chan pubsub.Event, 4)
		opts := []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.StartFrom(pubsub.Earliest)}
		if onDemand {
			opts = append(opts, pubsub.ReadOnDemand())
		}
		sub, err := b.Subscribe(ctx, topic, func(_ context.Context, ev pubsub.Event) error {
			if ev.ID == "e1" {
				got <- ev
			}
			return nil
		}, opts...)
		if err != nil {
			replica.Resume(t)
			t.Fatal(err)
		}
		if k, ok := sub.(pubsub.Kicker); ok {
			k.Kick()
		}
		select {
		case ev := <-got:
			t.Errorf("on-demand %v: e1 handed on (attempt %d) while the replica was paused: its read was not acknowledged", onDemand, ev.DeliveryAttempt)
		case <-time.After(1500 * time.Millisecond):
		}
		replica.Resume(t)
		if k, ok := sub.(pubsub.Kicker); ok {
			k.Kick()
		}
		select {
		case ev := <-got:
			if ev.DeliveryAttempt != 1 {
				t.Errorf("on-demand %v: e1 handed on with DeliveryAttempt %d after the resume, want 1 (never handed on before)", onDemand, ev.DeliveryAttempt)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("on-demand %v: e1 not handed on within 15s of the replica's resume", onDemand)
		}
		_ = sub.Unsubscribe(ctx)
	}
}
