package lease_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// slowBatch is an inmem backend whose batch renewals take latency (a
// round trip to a store 10ms away), returning ctx's error when ctx ends
// first, as a client that honours deadlines does.
type slowBatch struct {
	*inmem.Backend
	latency time.Duration
}

func (s *slowBatch) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	select {
	case <-time.After(s.latency):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Backend.RenewLeases(ctx, reqs)
}

// TestReviewH70ShortHeldStarvesLongOnes: one Keeper (as the shared Keeper
// of lease.Keep is for every Keep of a provider) holds a 3s lease on a
// store 10ms away, which its 1s renewals reach with room to spare. Beside
// it, another part of the program keeps short leases (30ms) one after
// another, which that latency cannot sustain: each is lost, as it should
// be. But the Keeper batches every Held due within half its interval into
// the same call, and gives the call a ctx that ends halfway to the
// earliest loss deadline among them: a few ms. So every renewal of the 3s
// lease rides in a call bounded by a dying 30ms lease's deadline, fails,
// is retried (a failed Held is due at once again, within half its
// interval) with the next short one, and the 3s lease is lost at its loss
// deadline on a store that answers every call in 10ms. Without the short
// leases (the control) it lives.
func TestReviewH70ShortHeldStarvesLongOnes(t *testing.T) {
	for _, churn := range []bool{false, true} {
		t.Run(fmt.Sprintf("churn=%v", churn), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &slowBatch{Backend: bubbleBackend(t), latency: 10 * time.Millisecond}
				k := lease.NewKeeper(b, lease.KeeperOptions{})
				h, err := k.Keep(t.Context(), "long", "a", 3*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				done := make(chan struct{})
				lostShort := 0
				go func() {
					defer close(done)
					for i := 0; ; i++ {
						if !churn {
							<-stop
							return
						}
						s, err := k.Keep(context.Background(), fmt.Sprint("short", i), "a", 30*time.Millisecond)
						if err != nil {
							t.Errorf("Keep short: %v", err)
							return
						}
						select {
						case <-s.Done():
							lostShort++
						case <-time.After(200 * time.Millisecond):
						case <-stop:
							s.Release(context.Background())
							return
						}
						s.Release(context.Background())
					}
				}()
				time.Sleep(10 * time.Second)
				err = h.Err()
				close(stop)
				<-done
				k.Close()
				t.Logf("short leases lost: %d", lostShort)
				if err != nil {
					t.Errorf("3s lease lost on a store that answers in 10ms: %v", err)
				}
			})
		})
	}
}
