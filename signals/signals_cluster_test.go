package signals_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestSendsOnCluster: concurrent Sends to different threads on a 3-master
// Cluster all succeed and run: each inbox publish creates its group, and is
// coalesced with other threads' inboxes and notices in other slots (a
// version whose group-creating pipelines were MULTI/EXEC failed 94 of 100
// with CROSSSLOT).
func TestSendsOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	b, err := redisstreams.New(c, redisstreams.Options{Prefix: "revsig"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var ran atomic.Int64
	rt, err := signals.New(b, func(ctx context.Context, r *signals.Run) error { ran.Add(int64(len(r.Signals))); return nil },
		signals.WithLinger(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	var wg sync.WaitGroup
	var fails atomic.Int64
	var first atomic.Value
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				_, err := rt.Send(context.Background(), fmt.Sprintf("th-%d-%d", i, j), signals.Signal{Type: "t"})
				if err != nil {
					fails.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		}(i)
	}
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d of 100 Sends failed, e.g. %v", fails.Load(), first.Load())
	}
	deadline := time.Now().Add(30 * time.Second)
	for ran.Load() < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 100 signals ran within 30s", ran.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
