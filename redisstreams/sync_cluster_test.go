package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
	"github.com/leasebus/leasebus/pubsub"
)

// TestSyncClusterWithReplicas: on a Cluster of 3 masters with a replica
// each (a ClusterClient with go-redis's defaults), with PublishSyncReplicas
// and LeaseSyncReplicas at 1, every publish that returns nil (Publish,
// PublishBatch, PublishFor from 8 goroutines over topics on every master,
// and one unit of publishes spanning the 3 masters, each part waited for on
// its own master) has its event on its master's replica when it returns;
// acquire, RenewLease, RenewLeases over keys on every master and transfer
// win, each lease on its master's replica; a group subscription on each
// master gets its events (reads waited for per master). With one master's replica
// paused, that master's publishes fail with ErrNotReplicated and its
// lease's renewal fails, while the other masters' go on: each master's
// WAIT counts its own replicas.
func TestSyncClusterWithReplicas(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	c := cl.Client(t)
	const timeout = 300 * time.Millisecond
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, LeaseSyncReplicas: 1, PublishSyncTimeout: timeout, LeaseSyncTimeout: timeout,
		Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()

	// A topic and a lease key on each master, and its replica.
	topicOf, keyOf, replicaOf := map[string]string{}, map[string]string{}, map[string]*redistest.Server{}
	for i := 0; (len(topicOf) < 3 || len(keyOf) < 3) && i < 1000; i++ {
		name := fmt.Sprint("n", i)
		if node, err := c.MasterForKey(ctx, b.keys.Stream(name)); err == nil && topicOf[node.Options().Addr] == "" {
			topicOf[node.Options().Addr] = name
		}
		if node, err := c.MasterForKey(ctx, b.keys.Lease(name)); err == nil && keyOf[node.Options().Addr] == "" {
			keyOf[node.Options().Addr] = name
		}
	}
	if len(topicOf) != 3 || len(keyOf) != 3 {
		t.Fatalf("topics on %d masters and lease keys on %d, want 3 each", len(topicOf), len(keyOf))
	}
	var masters []string
	for addr := range topicOf {
		rs := cl.ReplicasOf(t, addr)
		if len(rs) != 1 {
			t.Fatalf("master %s has %d replicas, want 1", addr, len(rs))
		}
		replicaOf[addr] = rs[0]
		masters = append(masters, addr)
	}
	// Clients of the replicas, in READONLY mode (a Cluster replica
	// redirects reads to its master otherwise).
	replicaClient := map[string]*redis.Client{}
	for m, r := range replicaOf {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr(), OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
		t.Cleanup(func() { rc.Close() })
		replicaClient[m] = rc
	}
	onReplica := func(master, key string) bool {
		n, err := replicaClient[master].Exists(context.Background(), key).Result()
		return err == nil && n == 1
	}
	eventOnReplica := func(master, key, id string) bool {
		msgs, err := replicaClient[master].XRange(context.Background(), key, "-", "+").Result()
		if err != nil {
			t.Errorf("XRANGE %s on master %s's replica: %v", key, master, err)
			return false
		}
		for _, m := range msgs {
			if m.Values[fieldID] == id {
				return true
			}
		}
		return false
	}

	// Each master's replica has acknowledged a write before the
	// publishes below count on it: right after the cluster formed, a first
	// WAIT once took longer than timeout (0 of 1 replicas within 300ms,
	// before any pause, on a loaded machine).
	for _, m := range masters {
		awaitSynced(t, b, topicOf[m])
	}

	// Publishes, concurrent and coalesced.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for g := range 8 {
		wg.Go(func() {
			for i := range 30 {
				master := masters[(g+i)%3]
				topic := topicOf[master]
				api := publishAPIs[i%len(publishAPIs)]
				id := fmt.Sprintf("%s-%d-%d", api.name, g, i)
				if err := api.call(ctx, b, topic, pubsub.Event{ID: id, Type: "t"}); err != nil {
					fail("%s %s to master %s: %v", api.name, id, master, err)
					continue
				}
				if !eventOnReplica(master, b.keys.Stream(topic), id) {
					fail("%s %s returned nil, but the event is not on master %s's replica", api.name, id, master)
				}
			}
		})
	}
	wg.Wait()
	for _, f := range failures[:min(len(failures), 10)] {
		t.Error(f)
	}

	// One unit over the three masters: each part waits on its own master.
	var reqs []*pubReq
	for _, m := range masters {
		fields, err := b.encodeFor(topicOf[m], pubsub.Event{ID: "spanning-" + m, Type: "t"})
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, &pubReq{key: b.keys.Stream(topicOf[m]), fields: fields})
	}
	reqs[0].then = reqs[1:]
	if err := b.bus.publishUnit(ctx, reqs[0]); err != nil {
		t.Fatalf("a unit over 3 masters = %v, want nil", err)
	}
	for _, m := range masters {
		if !eventOnReplica(m, b.keys.Stream(topicOf[m]), "spanning-"+m) {
			t.Errorf("the unit's event for master %s is not on its replica", m)
		}
	}

	// Group reads on every master (each read's pipeline ends with WAIT on
	// its master): each subscription gets its topic's events.
	got := make(chan string, 64)
	for _, m := range masters {
		sub, err := b.Subscribe(ctx, topicOf[m], func(_ context.Context, ev pubsub.Event) error {
			if ev.ID == "spanning-"+m {
				got <- m
			}
			return nil
		}, pubsub.Group("reader"), pubsub.StartFrom(pubsub.Earliest))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	}
	for range masters {
		select {
		case <-got:
		case <-time.After(15 * time.Second):
			t.Fatal("a group subscription on a Cluster with PublishSyncReplicas got no event within 15s")
		}
	}

	// Leases on every master.
	var reqsRenew []lease.Renewal
	for _, m := range masters {
		k := keyOf[m]
		r, err := b.AcquireLease(ctx, k, "a", time.Minute)
		if err != nil || !r.Acquired {
			t.Fatalf("AcquireLease(%s) on master %s = %+v, %v; want a win", k, m, r, err)
		}
		if !onReplica(m, b.keys.Lease(k)) {
			t.Errorf("the lease %s won on master %s is not on its replica", k, m)
		}
		if ok, err := b.RenewLease(ctx, k, "a", time.Minute); err != nil || !ok {
			t.Errorf("RenewLease(%s) on master %s = %v, %v; want true", k, m, ok, err)
		}
		reqsRenew = append(reqsRenew, lease.Renewal{Key: k, Owner: "a", TTL: time.Minute})
	}
	if out, err := b.RenewLeases(ctx, reqsRenew); err != nil || !out[0] || !out[1] || !out[2] {
		t.Errorf("RenewLeases over 3 masters = %v, %v; want all renewed", out, err)
	}
	if ok, err := b.TransferLease(ctx, keyOf[masters[0]], "a", "b", time.Minute); err != nil || !ok {
		t.Errorf("TransferLease on master %s = %v, %v; want true", masters[0], ok, err)
	}
	reqsRenew[0].Owner = "b"

	// One master's replica paused: only that master's calls fail.
	paused := masters[0]
	replicaOf[paused].Pause(t)
	for _, m := range masters {
		err := b.Publish(ctx, topicOf[m], pubsub.Event{ID: "paused-" + m, Type: "t"})
		switch {
		case m == paused && !errors.Is(err, ErrNotReplicated):
			t.Errorf("Publish to master %s, whose replica is paused = %v, want ErrNotReplicated", m, err)
		case m != paused && err != nil:
			t.Errorf("Publish to master %s, whose replica runs, with another master's paused = %v, want nil", m, err)
		}
	}
	out, err := b.RenewLeases(ctx, reqsRenew)
	var be *lease.BatchError
	if !errors.As(err, &be) {
		t.Errorf("RenewLeases with master %s's replica paused = %v, %v; want a *lease.BatchError", paused, out, err)
	} else {
		for i, m := range masters {
			if got := be.Errs[i] != nil; got != (m == paused) || out[i] == (m == paused) {
				t.Errorf("RenewLeases with master %s's replica paused: the lease on master %s: renewed %v, error %v", paused, m, out[i], be.Errs[i])
			}
		}
	}
	replicaOf[paused].Resume(t)
}
