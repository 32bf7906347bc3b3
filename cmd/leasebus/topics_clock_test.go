package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestTopicsDeleteClockBehindIds: "leasebus topics delete TOPIC" on a
// stream whose last id is ahead of the server's clock (60s here: a failover
// to a replica whose clock lags, an NTP step back) returns at once with the
// topic's events gone. Found by review 9 of 2026-11-22: it spun until the
// clock passed the id (no timeout: for good, with an id hours ahead).
func TestTopicsDeleteClockBehindIds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()
	c := srv.Client(t)
	ctx := context.Background()
	space, err := keys.NewSpace(redisstreams.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	key := space.Stream("orders")
	if err := c.Do(ctx, "XADD", key, fmt.Sprintf("%d-0", time.Now().Add(60*time.Second).UnixMilli()), "t", "x").Err(); err != nil {
		t.Fatal(err)
	}
	r := leasebus(t, 10*time.Second, "topics", "delete", "orders", "--redis", url)
	if r.code != 0 {
		t.Fatalf("topics delete: exit %d, stderr %q", r.code, r.stderr)
	}
	if n, err := c.XLen(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("XLEN after topics delete = %d, %v; want 0", n, err)
	}
}
