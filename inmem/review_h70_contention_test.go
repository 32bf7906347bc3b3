package inmem_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH70Contention: 64 goroutines race for three keys of one inmem
// Backend (the embedded default) on the system clock, as in the
// redisstreams review test of the same name.
func TestReviewH70Contention(t *testing.T) {
	b := inmem.New()
	t.Cleanup(func() { b.Close() })
	h70Contend(t, []lease.Provider{b}, 64, 20*time.Millisecond, 4*time.Second)
}

// h70Rec is one successful acquire or transfer seen by a contender.
type h70Rec struct {
	key, owner string
	token      uint64
	start, end time.Time
	transfer   bool
}

// h70Contend races goroutines on a few keys through the providers (one per
// "process"), each acquiring with a short TTL, never releasing, and
// sometimes transferring to a fresh owner, and checks what a holder may
// rely on: a token is never given to two owners; an owner whose acquire
// completed before another's started has the lower token; and an acquire by
// another owner never completes before the TTL of an earlier acquire
// (started before it) could have run out, unless a transfer intervened.
func h70Contend(t *testing.T, ps []lease.Provider, goroutines int, ttl, dur time.Duration) {
	t.Helper()
	var (
		mu   sync.Mutex
		recs []h70Rec
		errs int
		seq  atomic.Int64
	)
	keys := []string{"c0", "c1", "c2"}
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	for g := range goroutines {
		p := ps[g%len(ps)]
		wg.Go(func() {
			owner := fmt.Sprintf("g%d", g)
			for i := 0; time.Now().Before(stop); i++ {
				key := keys[(g+i)%len(keys)]
				start := time.Now()
				r, err := p.AcquireLease(context.Background(), key, owner, ttl)
				end := time.Now()
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
					t.Errorf("AcquireLease(%s, %s): %v", key, owner, err)
					return
				}
				if r.Acquired {
					mu.Lock()
					recs = append(recs, h70Rec{key: key, owner: owner, token: r.Token, start: start, end: end})
					mu.Unlock()
					if i%5 == 0 {
						to := fmt.Sprintf("t%d", seq.Add(1))
						start := time.Now()
						tok, err := p.(lease.TokenTransferer).TransferLeaseToken(context.Background(), key, owner, to, ttl)
						end := time.Now()
						if err != nil {
							t.Errorf("TransferLeaseToken(%s, %s -> %s): %v", key, owner, to, err)
							return
						}
						if tok > 0 {
							mu.Lock()
							recs = append(recs, h70Rec{key: key, owner: to, token: tok, start: start, end: end, transfer: true})
							mu.Unlock()
						}
					}
				}
				time.Sleep(time.Duration(g%3) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	byToken := map[string]map[uint64]string{}
	perKey := map[string][]h70Rec{}
	for _, r := range recs {
		if byToken[r.key] == nil {
			byToken[r.key] = map[uint64]string{}
		}
		if o, ok := byToken[r.key][r.token]; ok && o != r.owner {
			t.Errorf("key %s: token %d given to %s and to %s", r.key, r.token, o, r.owner)
		}
		byToken[r.key][r.token] = r.owner
		perKey[r.key] = append(perKey[r.key], r)
	}
	bad := 0
	for key, rs := range perKey {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				if b.start.After(a.end.Add(ttl)) {
					break
				}
				if a.owner == b.owner || !b.start.After(a.end) {
					continue
				}
				if b.token < a.token && bad < 10 {
					bad++
					t.Errorf("key %s: %s got token %d (done %v) before %s started and got the lower token %d", key, a.owner, a.token, a.end.Format("15:04:05.000000"), b.owner, b.token)
				}
				// b won after a had won, before a's TTL could run out:
				// fine only if a tenure was handed over in between.
				if !b.transfer && b.end.Before(a.start.Add(ttl)) {
					handed := false
					for _, c := range rs {
						if c.transfer && c.token > a.token && c.token <= b.token {
							handed = true
						}
					}
					if !handed && bad < 10 {
						bad++
						t.Errorf("key %s: %s acquired (token %d, done %v) before %s's lease (token %d, acquire started %v) could have expired (ttl %v)",
							key, b.owner, b.token, b.end.Format("15:04:05.000000"), a.owner, a.token, a.start.Format("15:04:05.000000"), ttl)
					}
				}
			}
		}
	}
	t.Logf("%d wins and transfers on %d keys by %d goroutines over %d providers, %d errors", len(recs), len(keys), goroutines, len(ps), errs)
}
