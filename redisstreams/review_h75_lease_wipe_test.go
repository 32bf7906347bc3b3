package redisstreams

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/lease"
)

// TestReviewH75WipedLease: Redis loses a kept lease and its fencing counter
// (a restart without persistence, or FLUSHALL). What the docs say happens
// must happen: another owner can win the key at once (the lease is gone),
// with a token above every token the key had before (acquire.lua takes the
// server's clock when the counter is gone); the old Held ends at its next
// renewal, which finds no lease (fail closed, ErrNotHeld), so the two
// overlap for at most about one renew interval; nothing re-creates the old
// holder's lease.
func TestReviewH75WipedLease(t *testing.T) {
	for _, how := range []string{"Restart", "FlushAll"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			b := urlBackend(t, srv.URL(), Options{})
			ctx := t.Context()
			const key, ttl = "wiped", 3 * time.Second
			// Many tenures, fast: the counter may run ahead of the clock.
			var highest uint64
			for i := range 200 {
				owner := fmt.Sprintf("o%d", i)
				r, err := b.AcquireLease(ctx, key, owner, ttl)
				if err != nil || !r.Acquired {
					t.Fatalf("AcquireLease %d: %+v, %v", i, r, err)
				}
				highest = max(highest, r.Token)
				if err := b.ReleaseLease(ctx, key, owner); err != nil {
					t.Fatal(err)
				}
			}
			k := lease.NewKeeper(b, lease.KeeperOptions{})
			t.Cleanup(func() { _ = k.Close() })
			held, err := k.Keep(ctx, key, "old", ttl)
			if err != nil {
				t.Fatal(err)
			}
			highest = max(highest, held.Token())
			// More Helds on the same Keeper: their renewals go in batches
			// (lease.BatchRenewer), which must fail closed too.
			var others []*lease.Held
			for i := range 5 {
				h, err := k.Keep(ctx, fmt.Sprintf("other%d", i), "old", ttl)
				if err != nil {
					t.Fatal(err)
				}
				others = append(others, h)
			}
			time.Sleep(300 * time.Millisecond)

			switch how {
			case "Restart":
				srv.Kill(t)
				srv.Restart(t)
			case "FlushAll":
				if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var won time.Time
			var r lease.Result
			for {
				r, err = b.AcquireLease(ctx, key, "new", ttl)
				if err == nil {
					won = time.Now()
					break
				}
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !r.Acquired {
				t.Fatalf("the wiped lease was not free: %+v", r)
			}
			if r.Token <= highest {
				t.Errorf("token after the %s: %d, not above the highest before it, %d", how, r.Token, highest)
			}
			// The old Held ends at its next renewal: within one renew
			// interval (TTL/3) and the renewal's round trip.
			bound := ttl/3 + time.Second
			select {
			case <-held.Done():
				t.Logf("%s: the old Held ended %v after the new owner won (renew interval %v)", how, time.Since(won).Round(time.Millisecond), ttl/3)
			case <-time.After(bound):
				t.Fatalf("the old Held still lived %v after another owner won the wiped key", bound)
			}
			if !errors.Is(held.Err(), lease.ErrNotHeld) {
				t.Errorf("old Held ended with %v, want ErrNotHeld", held.Err())
			}
			for i, h := range others {
				select {
				case <-h.Done():
				case <-time.After(bound):
					t.Fatalf("Held other%d still lived %v after the %s", i, bound, how)
				}
				if !errors.Is(h.Err(), lease.ErrNotHeld) {
					t.Errorf("Held other%d ended with %v, want ErrNotHeld", i, h.Err())
				}
				if o, err := b.GetLeaseOwner(ctx, fmt.Sprintf("other%d", i)); err != nil || o != "" {
					t.Errorf("other%d after its Held ended: owner %q, %v; want none (nothing re-creates it)", i, o, err)
				}
			}
			owner, err := b.GetLeaseOwner(ctx, key)
			if err != nil || owner != "new" {
				t.Errorf("owner after the old Held ended: %q, %v; want new", owner, err)
			}
			// A renewal of the vanished tenure is refused, not re-created.
			ok, err := b.RenewLease(ctx, key, "old", ttl)
			if ok || err != nil {
				t.Errorf("RenewLease by the wiped owner: %v, %v; want false, nil", ok, err)
			}
		})
	}
}
