package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH74ThreadsManyLeftoverInboxes: "leasebus threads" lists the
// threads no process holds whose inbox still has signals (owners died, no
// runtime up): after an outage, hundreds or thousands of them. Over a link
// with a 2ms round trip it must list 600 of them within --timeout 3s.
//
// Found by review h74 (2026-11-29): the command read each leftover thread's
// status one after the other, five commands (GET, EVALSHA, XINFO STREAM,
// XINFO GROUPS, XRANGE) and several round trips per thread: 15,000 leftover
// inboxes took 6.6s on loopback; here the 600 took longer than 3s
// (exit 1, "Redis did not answer within --timeout 3s").
func TestReviewH74ThreadsManyLeftoverInboxes(t *testing.T) {
	const n = 600
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	space, err := keys.NewSpace("leasebus")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			k := space.Stream(signals.InboxTopic(fmt.Sprintf("t%03d", i)))
			p.XGroupCreateMkStream(ctx, k, signals.InboxGroup, "$")
			p.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []any{"k", "v"}})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := redistest.NewSlowLink(t, srv.Addr(), time.Millisecond).Addr() // a 2ms round trip
	start := time.Now()
	r := leasebus(t, 120*time.Second, "threads", "--timeout", "3s", "--redis", "redis://"+addr)
	t.Logf("exit %d after %v, stderr %q, %d lines", r.code, time.Since(start).Round(time.Millisecond), r.stderr, strings.Count(r.stdout, "\n"))
	if r.code != exitOK || strings.Count(r.stdout, "\n") != n+1 || !strings.Contains(r.stdout, "t599") {
		t.Errorf("threads: exit %d, %d lines, stderr %q; want exit 0 and the %d threads listed (+ header)", r.code, strings.Count(r.stdout, "\n"), r.stderr, n)
	}
}

// TestReviewH74LeasesMany: "leasebus leases" on a deployment with 2,000
// live leases over a link with a 2ms round trip must list them within
// --timeout 4s.
//
// Found by review h74 (2026-11-29): the command read each listed lease's
// status (LeaseState, for the STATUS column) one after the other, a round
// trip each: 10,000 leases took 2.4s on loopback; here the 2,000 took over
// 4s (exit 1 at --timeout 4s; 5.5s with --timeout 60s).
func TestReviewH74LeasesMany(t *testing.T) {
	if testing.Short() {
		t.Skip("acquires 2,000 leases")
	}
	const n = 2000
	srv := redistest.Start(t, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range n {
		if _, err := b.AcquireLease(context.Background(), fmt.Sprintf("jobs/%04d", i), "holder", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	addr := redistest.NewSlowLink(t, srv.Addr(), time.Millisecond).Addr() // a 2ms round trip
	start := time.Now()
	r := leasebus(t, 120*time.Second, "leases", "--timeout", "4s", "--redis", "redis://"+addr)
	t.Logf("exit %d after %v, stderr %q, %d lines", r.code, time.Since(start).Round(time.Millisecond), r.stderr, strings.Count(r.stdout, "\n"))
	if r.code != exitOK || strings.Count(r.stdout, "\n") != n+1 || !strings.Contains(r.stdout, "jobs/1999") {
		t.Errorf("leases: exit %d, %d lines, stderr %q; want exit 0 and the %d leases listed (+ header)", r.code, strings.Count(r.stdout, "\n"), r.stderr, n)
	}
}
