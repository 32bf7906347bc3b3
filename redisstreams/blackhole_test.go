package redisstreams

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestLeaseBlackHole cuts the holder off from Redis the way a dead network
// path does — its connections stay open and nothing answers — with clients
// built exactly as users build them: NewURL, and redis.NewClient with
// go-redis's default options (which ignore ctx deadlines). The holder keeps
// one 2s lease it watches and 1,000 leases of TTLs from 100ms to 30s in one
// Keeper. Another client, straight to the server, tries to acquire the
// leases of up to 2s; the moment it wins one, the holder's Held must already
// report it lost (Err non-nil).
func TestLeaseBlackHole(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		name   string
		holder func(t *testing.T, addr string) *Backend
	}{
		{"NewURL", func(t *testing.T, addr string) *Backend {
			b, err := NewURL(t.Context(), "redis://"+addr+"/0", Options{Prefix: "bh1"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
		{"DefaultClient", func(t *testing.T, addr string) *Backend {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { c.Close() })
			b, err := New(c, Options{Prefix: "bh2"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := redistest.NewProxy(t, srv.Addr())
			hb := tc.holder(t, proxy.Addr())
			other, err := NewURL(t.Context(), srv.URL(), Options{Prefix: hb.opts.Prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })

			k := lease.NewKeeper(hb, lease.KeeperOptions{})
			t.Cleanup(func() { k.Close() })
			ttls := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 2 * time.Second, 10 * time.Second, 30 * time.Second}
			var watched []*lease.Held
			for i := range 1000 {
				ttl := ttls[i%len(ttls)]
				h, err := k.Keep(t.Context(), fmt.Sprintf("k%d", i), "a", ttl)
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= 2*time.Second {
					watched = append(watched, h)
				}
			}
			main, err := k.Keep(t.Context(), "main", "a", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			watched = append(watched, main)
			time.Sleep(time.Second) // renewals go on through the proxy
			// Leases of a second or more must have lived through it; a
			// 100ms or 300ms one may be lost to a late renewal on a loaded
			// machine (fail-closed, not a broken promise), and the check
			// below still holds for it.
			for _, h := range watched {
				if err := h.Err(); err != nil && h.TTL() >= time.Second {
					t.Fatalf("Held %s (TTL %v) lost before the black hole: %v", h.Key(), h.TTL(), err)
				}
			}

			proxy.BlackHole()
			start := time.Now()
			t.Cleanup(proxy.Restore) // frees the client's stuck calls
			var mu sync.Mutex
			left := map[*lease.Held]bool{}
			for _, h := range watched {
				left[h] = true
			}
			var mainTaken time.Duration
			for remaining(&mu, left) > 0 {
				if time.Since(start) > 10*time.Second {
					t.Fatalf("%d leases of at most 2s not acquired by the other client 10s after the black hole", len(left))
				}
				var wg sync.WaitGroup
				mu.Lock()
				round := slices.Collect(maps.Keys(left))
				mu.Unlock()
				for _, h := range round {
					wg.Go(func() {
						r, err := other.AcquireLease(t.Context(), h.Key(), "b", time.Minute)
						if err != nil || !r.Acquired {
							return
						}
						if err := h.Err(); err == nil {
							t.Errorf("the other client acquired %s (TTL %v) %v after the black hole while the holder's Held still reports it live", h.Key(), h.TTL(), time.Since(start))
						}
						mu.Lock()
						delete(left, h)
						if h == main {
							mainTaken = time.Since(start)
						}
						mu.Unlock()
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("the 2s lease was acquired by the other client %v after the black hole; the holder had already stopped", mainTaken.Round(time.Millisecond))
		})
	}
}

func remaining(mu *sync.Mutex, m map[*lease.Held]bool) int {
	mu.Lock()
	defer mu.Unlock()
	return len(m)
}
