package redisstreams

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redistest"
)

// TestLeaseCallsRideThroughSlotMove: while a lease's Cluster slot migrates
// (SETSLOT MIGRATING and IMPORTING, as `redis-cli --cluster reshard` leaves
// it while it moves the slot's keys), Redis refuses every lease script of
// the slot (TRYAGAIN, or ASK), and go-redis's own quick retries give up long
// before the move ends. On a Backend built as users build it (New on a
// ClusterClient with go-redis's defaults), with and without
// LeaseSyncReplicas, lease calls made during the move now wait for it and
// then succeed: a renewal of a held lease renews it, an acquire of a free
// key of the slot wins, a transfer hands over, each with its usual result,
// none before the move ends (a release, whose keys all exist on the source,
// runs at once). A call whose ctx ends first
// returns then, with the refusal (TRYAGAIN or ASK) as its error, or its
// ctx's end when that cut a try short.
//
// Before, each failed at once with TRYAGAIN or ASK: a renewal that met a
// move longer than what was left of its lease lost the lease, and a Send
// of the signals runtime to a thread whose slot moved failed
// (TestClusterReshardUnderLoad saw 1-5 per resharding).
func TestLeaseCallsRideThroughSlotMove(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	for _, synced := range []bool{false, true} {
		t.Run(map[bool]string{false: "Plain", true: "Synced"}[synced], func(t *testing.T) {
			opts := Options{Logger: slog.New(slog.DiscardHandler)}
			if synced {
				opts.LeaseSyncReplicas, opts.LeaseSyncTimeout = 1, time.Second
			}
			b := psBackend(t, cl.Client(t), opts)
			ctx := t.Context()
			const hold = 700 * time.Millisecond // how long the move lasts
			// Lease names of one hash slot (a name is its keys' hash tag).
			held := "held"
			slot := keys.Slot(b.keys.Lease(held))
			var same []string
			for i := 0; len(same) < 3 && i < 1_000_000; i++ {
				if n := fmt.Sprint("same-", i); keys.Slot(b.keys.Lease(n)) == slot {
					same = append(same, n)
				}
			}
			if len(same) < 3 {
				t.Fatal("found no three names sharing the slot of \"held\"")
			}
			fresh, handed, freed := same[0], same[1], same[2]
			for _, k := range []string{held, handed, freed} {
				if r, err := b.AcquireLease(ctx, k, "o", time.Minute); err != nil || !r.Acquired {
					t.Fatalf("AcquireLease(%s) before the move = %+v, %v", k, r, err)
				}
			}

			m := cl.StartSlotMove(t, b.keys.Lease(held))
			began := time.Now()
			type result struct {
				what string
				err  error
				ok   bool
				took time.Duration
			}
			results := make(chan result, 5)
			call := func(what string, f func(ctx context.Context) (bool, error)) {
				go func() {
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					defer cancel()
					ok, err := f(cctx)
					results <- result{what, err, ok, time.Since(began)}
				}()
			}
			call("renew held", func(ctx context.Context) (bool, error) { return b.RenewLease(ctx, held, "o", time.Minute) })
			call("acquire fresh", func(ctx context.Context) (bool, error) {
				r, err := b.AcquireLease(ctx, fresh, "p", time.Minute)
				return r.Acquired, err
			})
			call("transfer handed", func(ctx context.Context) (bool, error) {
				return b.TransferLease(ctx, handed, "o", "q", time.Minute)
			})
			call("release freed", func(ctx context.Context) (bool, error) { return true, b.ReleaseLease(ctx, freed, "o") })
			// A call whose ctx ends during the move returns then.
			go func() {
				cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				ok, err := b.RenewLease(cctx, held, "o", time.Minute)
				results <- result{"renew with a 300ms ctx", err, ok, time.Since(began)}
			}()

			time.Sleep(hold / 2)
			m.Migrate(m.Keys(1000)[:1]...) // the slot's keys split, as reshard's batches leave them
			time.Sleep(hold / 2)
			for m.MigrateRest() > 0 {
			}
			m.Finish()
			moved := time.Since(began)

			for range 5 {
				r := <-results
				t.Logf("%s: %v, %v after %v (the move took %v)", r.what, r.ok, r.err, r.took.Round(time.Millisecond), moved.Round(time.Millisecond))
				if r.what == "renew with a 300ms ctx" {
					// The refusal, or the ctx's end when that cut a try short.
					if r.err == nil || r.ok || !(strings.Contains(r.err.Error(), "TRYAGAIN") || strings.Contains(r.err.Error(), "ASK") ||
						strings.Contains(r.err.Error(), "deadline")) || r.took > hold {
						t.Errorf("%s returned %v, %v after %v; want the refusal (TRYAGAIN or ASK) at its ctx's end", r.what, r.ok, r.err, r.took)
					}
					continue
				}
				if r.err != nil || !r.ok {
					t.Errorf("%s during the move = %v, %v; want done", r.what, r.ok, r.err)
				}
				if r.took < hold && r.what != "release freed" { // release.lua's keys all exist: it runs
					t.Errorf("%s returned %v after the move began, before it ended (%v): not a call of the migrating slot", r.what, r.took, hold)
				}
			}
			for k, want := range map[string]string{held: "o", fresh: "p", handed: "q", freed: ""} {
				if got, err := b.GetLeaseOwner(ctx, k); err != nil || got != want {
					t.Errorf("owner of %s after the move = %q, %v; want %q", k, got, err, want)
				}
			}
		})
	}
}

// TestLeaseCallWithoutDeadlineDuringEndlessSlotMove: redisstreams/doc.go
// says a lease call refused because its slot migrates is sent again "until
// its ctx ends; on a ctx without a deadline, for at most 5s"
// (migratingMaxWait), and Close ends the tries. A slot left half-moved (a
// resharding that stopped: MIGRATING and IMPORTING set, its keys split) must
// not hold a call on context.Background() for longer: it returns the
// refusal after 5s (+2s slack for a loaded machine), and a call that Close
// meets returns within a second of it with the refusal or ErrClosed.
//
// Found when this test was written (2026-11-29): the 5s limit was a ctx
// deadline around the tries, which cut the last try short: the call
// returned "context deadline exceeded (the script was sent and may have
// run)" for a script the server had refused every time, to a caller that
// had set no deadline. Now the limit only stops new tries.
func TestLeaseCallWithoutDeadlineDuringEndlessSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	b := psBackend(t, cl.Client(t), Options{Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	held := "held"
	if r, err := b.AcquireLease(ctx, held, "o", time.Minute); err != nil || !r.Acquired {
		t.Fatalf("AcquireLease = %+v, %v", r, err)
	}
	m := cl.StartSlotMove(t, b.keys.Lease(held))
	if m.Migrate(m.Keys(1000)[:1]...); m.Moved() == 0 {
		t.Fatal("no key of the slot moved")
	}
	defer func() { // leave the cluster whole for its cleanup
		for m.MigrateRest() > 0 {
		}
		m.Finish()
	}()

	start := time.Now()
	ok, err := b.RenewLease(context.Background(), held, "o", time.Minute)
	took := time.Since(start)
	t.Logf("RenewLease on a ctx without a deadline: %v, %v after %v", ok, err, took.Round(time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Errorf("RenewLease during an endless move = %v, %v; want the refusal (TRYAGAIN)", ok, err)
	}
	if took < migratingMaxWait-migratingRetry.Max || took > migratingMaxWait+2*time.Second {
		t.Errorf("RenewLease returned after %v; want after about %v (migratingMaxWait)", took, migratingMaxWait)
	}

	done := make(chan error, 1)
	go func() {
		_, err := b.RenewLease(context.Background(), held, "o", time.Minute)
		done <- err
	}()
	time.Sleep(500 * time.Millisecond) // the call is in its tries
	closed := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("RenewLease met by Close: %v after %v", err, time.Since(closed).Round(time.Millisecond))
		if err == nil {
			t.Error("RenewLease met by Close returned nil")
		}
	case <-time.After(time.Second):
		t.Errorf("RenewLease still trying 1s after Close")
		<-done
	}
}
