package redisstreams

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// cmdNames counts, by name, the commands a client sends (in pipelines too;
// read.lua's calls as "read.lua"), and the group reads that found nothing
// ("empty read").
type cmdNames struct {
	redistest.RoundTrips
	mu sync.Mutex
	n  map[string]int
}

func newCmdNames() *cmdNames {
	h := &cmdNames{n: map[string]int{}}
	h.Observe = func(_ context.Context, cmds []redis.Cmder, _ bool) {
		for _, c := range cmds {
			name := strings.ToLower(c.Name())
			if _, ok := groupReadOf(c); ok {
				name = "read.lua"
			}
			h.add(name)
		}
	}
	h.Answered = func(_ context.Context, cmds []redis.Cmder, _ bool) {
		for _, c := range cmds {
			if _, ok := groupReadOf(c); !ok {
				continue
			}
			if res, _, err := readReply(c.(*redis.Cmd), true); err == redis.Nil || err == nil && len(res) == 0 {
				h.add("empty read")
			}
		}
	}
	return h
}

func (h *cmdNames) add(name string) {
	h.mu.Lock()
	h.n[name]++
	h.mu.Unlock()
}

func (h *cmdNames) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

// TestOnDemandReadsToTail: one Kick of a ReadOnDemand subscription reads
// everything published before it, one read after another while each comes
// back full and short of the stream's last entry, and stops at the read
// that returned that entry: no read that finds nothing. read.lua returns
// the stream's last entry id with the entries, read in the same step, on
// RESP2 and RESP3 clients alike; no XREVRANGE goes out (before, each read
// carried one in its pipeline, which go-redis decoded entry and all).
func TestOnDemandReadsToTail(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprint("RESP", proto), func(t *testing.T) {
			o := srv.ClientOptions()
			o.Protocol = proto
			c := redis.NewClient(o)
			t.Cleanup(func() { _ = c.Close() })
			hook := newCmdNames()
			c.AddHook(hook)
			// Reads of at most 4 entries: a kick of 24 reads 6 times,
			// the last one returning the stream's last entry.
			b := psBackend(t, c, Options{BatchSize: 4})
			ctx := context.Background()
			const n = 24
			var got atomic.Int64
			all := make(chan struct{})
			sub, err := b.Subscribe(ctx, "t", func(ctx context.Context, e pubsub.Event) error {
				if got.Add(1) == n {
					close(all)
				}
				return nil
			}, pubsub.Group("g"), pubsub.ReadOnDemand(), pubsub.StartFrom(pubsub.Earliest))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe(ctx)
			// The read it makes as it starts finds nothing.
			waitFor(t, func() bool { return hook.get("read.lua") >= 1 })
			time.Sleep(50 * time.Millisecond)
			for i := range n {
				if err := b.Publish(ctx, "t", pubsub.Event{Type: "x", ID: fmt.Sprint(i)}); err != nil {
					t.Fatal(err)
				}
			}
			before, emptyBefore := hook.get("read.lua"), hook.get("empty read")
			sub.(pubsub.Kicker).Kick()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d events delivered within 10s of one Kick", got.Load(), n)
			}
			time.Sleep(200 * time.Millisecond) // a read that finds nothing would come now
			reads, empty := hook.get("read.lua")-before, hook.get("empty read")-emptyBefore
			t.Logf("RESP%d: %d reads (%d found nothing) for %d events after one Kick", proto, reads, empty, n)
			if reads < n/4 || empty != 0 {
				t.Errorf("%d reads for %d events after one Kick, %d of them found nothing; want at least %d, none empty", reads, n, empty, n/4)
			}
			if x := hook.get("xrevrange"); x != 0 {
				t.Errorf("%d XREVRANGE sent, want none", x)
			}
			if g := got.Load(); g != n {
				t.Errorf("%d events delivered, want %d", g, n)
			}
		})
	}
}
