package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestFreshClusterClientQueuedFailFast (review revL, helper 17): a Backend on a fresh
// Cluster client (slot map not loaded yet: laneOf gives the zero lane) whose
// master 0 is SIGSTOPped. 600 calls for the stopped master's keys and 200
// for healthy keys start at once, on Background. They all join the zero
// lane. The first batch for the stopped master fails on the client's
// timeouts (ReadTimeout 1s, no retries); the map is loaded by then, so
// failLeaseQueueAfter / failQueuedAfter re-derive the lane from batch[0]
// as master 0's lane, not the zero lane the calls queued in: nothing was
// failed fast, and the queued calls (healthy ones with them) waited for one
// batch timeout after another: the last call for the stopped master
// returned after 20-38s, 0-5 of 600 failed as "not sent". Each request now
// remembers the lane it joined: 597-599 fail as not sent, the last returns
// after 5.1s. Calls made before the client had a map of slots still shared
// the zero lane: on a loaded machine (two busy loops beside the test) 11 of
// 12 runs made no lane at all, the healthy calls waited 4.2-9.4s, 32 of 200
// failed in 2 runs, and two batches of the zero lane for the stopped
// master in flight at once left only 404-408 of 600 failed fast (and 200-410
// in CI runs). Now the first calls wait for one shared load of the map
// (awaitSlotMap), so every call joins its master's lane: 3 lanes, the
// healthy calls done within 1.1s (the load may try the stopped master
// first: one ReadTimeout), 598-599 of 600 failed fast, in 6 of 6 runs on
// the same loaded machine.
func TestFreshClusterClientQueuedFailFast(t *testing.T) {
	redistest.Require(t)
	for _, op := range []string{"lease", "publish"} {
		t.Run(op, func(t *testing.T) { freshClusterFailFast(t, op) })
	}
}

func freshClusterFailFast(t *testing.T, op string) {
	cl := redistest.StartCluster(t, 3)
	probe := cl.Client(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { c.Close() })
	b := newBackendOn(t, c)
	ctx := context.Background()
	paused := cl.Nodes()[0]
	call, healthy, sick := clusterOp(t, b, probe, op, "fr-", paused.Addr(), 200, 600)
	paused.Pause(t)
	t.Cleanup(func() { paused.Resume(t) })
	var (
		wg                       sync.WaitGroup
		mu                       sync.Mutex
		sickMax, healthyMax      time.Duration
		notSent, sickOK, hOK, hE int
	)
	start := time.Now()
	run := func(name string, isSick bool) {
		defer wg.Done()
		err := call(ctx, name)
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		if isSick {
			sickMax = max(sickMax, took)
			if err == nil {
				sickOK++
			} else if strings.Contains(err.Error(), "not sent") {
				notSent++
			}
		} else {
			healthyMax = max(healthyMax, took)
			if err == nil {
				hOK++
			} else {
				hE++
			}
		}
	}
	for i := range 800 {
		wg.Add(1)
		if i%4 == 3 {
			go run(healthy[i/4], false)
		} else {
			go run(sick[i-i/4], true)
		}
	}
	wg.Wait()
	t.Logf("%s: lanes made %d; the last of 600 calls for the stopped master returned after %v (%d failed as not sent, %d ok); the last of 200 healthy calls after %v (%d ok, %d failed)",
		op, map[string]int{"lease": b.leaseQ.count(), "publish": b.bus.pubQ.count()}[op], sickMax, notSent, sickOK, healthyMax, hOK, hE)
	if notSent < 300 || sickMax > 15*time.Second {
		t.Errorf("%s: calls queued behind a failed batch for the stopped master were not failed fast: %d of 600 failed as not sent (want at least 300), the last returned after %v (want under 15s; client timeouts 1s, no retries)", op, notSent, sickMax)
	}
	if healthyMax > 4*time.Second || hE > 0 {
		t.Errorf("%s: healthy calls waited for the stopped master: the last returned after %v (want under 4s: at most one client timeout, the map's load, comes before them), %d failed (want 0)", op, healthyMax, hE)
	}
	lanes := map[string]int{"lease": b.leaseQ.count(), "publish": b.bus.pubQ.count()}[op]
	if lanes != 3 {
		t.Errorf("%s: %d lanes made, want one per master (3): the first calls did not wait for the client's map of slots", op, lanes)
	}
}

// TestClusterUnreachableAtStart (review revL, helper 17): a Backend on a fresh
// Cluster client while every master is SIGSTOPped. Lease calls on a 500ms
// ctx must return by then; after the masters resume, calls must succeed
// and be routed per master (masterOf's loads on noWait, which clear
// go-redis's activeAddrs, must not have broken the client).
func TestClusterUnreachableAtStart(t *testing.T) {
	redistest.Require(t)
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { c.Close() })
	b := newBackendOn(t, c)
	for _, n := range cl.Nodes() {
		n.Pause(t)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
	)
	start := time.Now()
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, _ = b.AcquireLease(ctx, fmt.Sprint("un-", i), "o", time.Minute)
			mu.Lock()
			slowest = max(slowest, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("50 lease calls on a 500ms ctx, every master stopped: the last returned after %v", slowest)
	if slowest > 1500*time.Millisecond {
		t.Errorf("calls on a 500ms ctx returned after %v", slowest)
	}
	for _, n := range cl.Nodes() {
		n.Resume(t)
	}
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = b.AcquireLease(ctx, "after", "o", time.Minute)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the masters resumed, AcquireLease still fails: %v", err)
	}
	ok := 0
	for i := range 200 {
		if _, err := b.AcquireLease(context.Background(), fmt.Sprint("ok-", i), "o", time.Minute); err == nil {
			ok++
		}
	}
	t.Logf("after resume: %d of 200 lease calls ok, %d lanes", ok, b.leaseQ.count())
	if ok != 200 || b.leaseQ.count() != 3 {
		t.Errorf("after resume: %d of 200 ok, %d lanes (want 200, 3)", ok, b.leaseQ.count())
	}
}
