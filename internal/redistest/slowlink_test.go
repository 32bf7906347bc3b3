package redistest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSlowLink checks the link itself: a PING takes at least the round
// trip (twice the one-way delay), and 20 concurrent PINGs on 20
// connections all take about one round trip, not twenty (the link adds
// latency, not queueing).
func TestSlowLink(t *testing.T) {
	srv := Start(t, Options{})
	const oneWay = 5 * time.Millisecond
	link := NewSlowLink(t, srv.Addr(), oneWay)
	c := redis.NewClient(&redis.Options{Addr: link.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // dial
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 2*oneWay {
		t.Fatalf("PING took %v through a link of %v each way", d, oneWay)
	}
	// Open 20 connections, then PING on all at once.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Ping(ctx).Err() }()
	}
	wg.Wait()
	t0 = time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Ping(ctx).Err(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(t0); d > 10*oneWay {
		t.Fatalf("20 concurrent PINGs took %v through a link of %v each way: want about one round trip", d, oneWay)
	}
}
