package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/lease"
)

// stuckBatch is an inmem backend whose batch renewals hang, ignoring ctx,
// until release closes, when they touch a key in stuck (or every one once
// all is set). It records the keys of every call that hung.
type stuckBatch struct {
	*inmem.Backend
	release chan struct{}
	mu      sync.Mutex
	stuck   map[string]bool
	all     bool
	hungIn  map[string]bool // keys that were in a hung call
}

func (s *stuckBatch) hangs(reqs []lease.Renewal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	hang := s.all
	for _, r := range reqs {
		hang = hang || s.stuck[r.Key]
	}
	if hang {
		for _, r := range reqs {
			s.hungIn[r.Key] = true
		}
	}
	return hang
}

func (s *stuckBatch) RenewLeases(ctx context.Context, reqs []lease.Renewal) ([]bool, error) {
	if s.hangs(reqs) {
		<-s.release
	}
	return s.Backend.RenewLeases(ctx, reqs)
}

func (s *stuckBatch) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if s.hangs([]lease.Renewal{{Key: key}}) {
		<-s.release
	}
	return s.Backend.RenewLease(ctx, key, owner, ttl)
}

// noBatch hides stuckBatch's batch renewal.
type noBatch struct{ lease.Provider }

// TestKeepMixedTTLsWhileOneCallHangs holds 1,000 leases of TTLs from 100ms
// to 30s in one Keeper while the renew call of one 3s lease hangs for good
// (ignoring its ctx, as over a black-holed network with a client that
// ignores deadlines). Every 10ms (100ms after 3s) it checks every Held: none may be live
// while the backend no longer gives the key to its owner, and every Held
// that never was in a hung call must still be live at the end.
func TestKeepMixedTTLsWhileOneCallHangs(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := bubbleBackend(t)
				s := &stuckBatch{Backend: b, release: make(chan struct{}), stuck: map[string]bool{"k4": true}, hungIn: map[string]bool{}}
				var p lease.Provider = s
				if !batch {
					p = noBatch{s}
				}
				k := lease.NewKeeper(p, lease.KeeperOptions{})
				// Cleanups run last-in first-out: release the hung call,
				// then Close (which waits for it).
				t.Cleanup(func() { k.Close() })
				t.Cleanup(func() { close(s.release) })

				const n = 1000
				ttls := []time.Duration{30 * time.Second, 100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second}
				hs := make([]*lease.Held, n)
				for i := range n {
					h, err := k.Keep(t.Context(), fmt.Sprint("k", i), "a", ttls[i%len(ttls)])
					if err != nil {
						t.Fatal(err)
					}
					hs[i] = h
					if i%100 == 0 {
						time.Sleep(7 * time.Millisecond) // spread the due times
					}
				}
				// 6s: every 10ms for 3s, then every 100ms (k4, 3s TTL,
				// first renews at 1s and must be lost by 2.7s).
				for i := range 300 + 30 {
					step := 10 * time.Millisecond
					if i >= 300 {
						step = 100 * time.Millisecond
					}
					time.Sleep(step)
					for _, h := range hs {
						if h.Err() == nil && owner(t, b, h.Key()) != "a" {
							t.Fatalf("Held %s (TTL %v) live while the backend's holder is %q", h.Key(), h.TTL(), owner(t, b, h.Key()))
						}
					}
				}
				if !isDone(hs[4]) {
					t.Fatalf("the Held whose renewal hangs is live 6s in, want it lost by its deadline")
				}
				if err := hs[4].Err(); !errors.Is(err, lease.ErrNotHeld) {
					t.Fatalf("hung Held Err = %v, want ErrNotHeld", err)
				}
				s.mu.Lock()
				hung := len(s.hungIn)
				s.mu.Unlock()
				live := 0
				for _, h := range hs {
					s.mu.Lock()
					wasHung := s.hungIn[h.Key()]
					s.mu.Unlock()
					if !wasHung {
						if err := h.Err(); err != nil {
							t.Fatalf("Held %s (TTL %v), never in a hung call, lost: %v", h.Key(), h.TTL(), err)
						}
						live++
					}
				}
				t.Logf("%d Helds in the hung call, %d live beside it", hung, live)
				if live < n/2 {
					t.Fatalf("only %d of %d Helds were renewed beside the hung call", live, n)
				}
			})
		})
	}
}

// TestKeepErrAtDeadline checks the accessors at the loss deadline itself:
// Err and Context().Err are non-nil from the first instant of the deadline,
// and the deadline is the acquire's start + TTL − TTL/10.
func TestKeepErrAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBackend(t)
		s := &stuckBatch{Backend: b, release: make(chan struct{}), stuck: map[string]bool{}, hungIn: map[string]bool{}, all: true}
		t.Cleanup(func() { close(s.release) })
		start := time.Now()
		h, err := lease.Keep(t.Context(), s, "k", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		want := start.Add(ttl - ttl/10)
		if d := h.Deadline(); !d.Equal(want) {
			t.Fatalf("Deadline = %v after start, want %v", d.Sub(start), want.Sub(start))
		}
		time.Sleep(time.Until(want) - time.Nanosecond)
		if err := h.Err(); err != nil {
			t.Fatalf("Err just before the deadline = %v, want nil", err)
		}
		time.Sleep(time.Nanosecond)
		if err := h.Err(); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Err at the deadline = %v, want ErrNotHeld", err)
		}
		if err := h.Context().Err(); err == nil {
			t.Fatal("Context().Err() at the deadline is nil")
		}
		if !isDone(h) {
			t.Fatal("Done not closed at the deadline")
		}
	})
}

// TestSpinningValuesRejected: option values that would make a Keeper or
// Wait spin are errors naming the field.
func TestSpinningValuesRejected(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	k := lease.NewKeeper(b, lease.KeeperOptions{RenewEvery: time.Nanosecond})
	defer k.Close()
	if _, err := k.Keep(t.Context(), "k", "a", time.Second); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "RenewEvery") {
		t.Errorf("Keep with RenewEvery 1ns = %v, want ErrInvalid naming RenewEvery", err)
	}
	for _, bo := range []lease.Backoff{{Min: time.Nanosecond}, {Max: time.Microsecond}} {
		if _, err := lease.Wait(t.Context(), b, "w", "a", time.Second, bo); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "backoff") {
			t.Errorf("Wait with %+v = %v, want ErrInvalid naming the backoff", bo, err)
		}
	}
}

var errReplyLost = errors.New("transfer reply lost")

// xferRace is an inmem backend whose TransferLease happens but reports a
// transport error, and whose RenewLease replies are held back while gate
// is set (the renewal itself is applied at once, before the transfer).
type xferRace struct {
	lease.Provider
	mu   sync.Mutex
	gate chan struct{}
}

func (x *xferRace) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	x.mu.Lock()
	g := x.gate
	x.mu.Unlock()
	ok, err := x.Provider.RenewLease(ctx, key, owner, ttl)
	if g != nil {
		<-g
	}
	return ok, err
}

func (x *xferRace) TransferLease(ctx context.Context, key, from, to string, ttl time.Duration) (bool, error) {
	_, _ = x.Provider.TransferLease(ctx, key, from, to, ttl)
	return false, errReplyLost
}

// TestKeepTransferUnknownOutcome: a Transfer whose outcome is unknown (the
// reply was lost) makes the Keeper renew at once to find out. A renewal
// that was already in flight, answered "renewed" from before the transfer,
// must not count: the Held ends as soon as the new renewal is refused,
// not a renew interval later.
func TestKeepTransferUnknownOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBackend(t)
		x := &xferRace{Provider: b, gate: make(chan struct{})}
		k := lease.NewKeeper(x, lease.KeeperOptions{RenewEvery: 10 * time.Second})
		t.Cleanup(func() { k.Close() })
		h, err := k.Keep(t.Context(), "k", "a", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10*time.Second + time.Millisecond) // a renewal is in flight, its reply held
		synctest.Wait()
		if _, err := h.Transfer(t.Context(), "b"); !errors.Is(err, errReplyLost) {
			t.Fatalf("Transfer = %v, want the transport error", err)
		}
		at := time.Now()
		x.mu.Lock()
		close(x.gate)
		x.gate = nil
		x.mu.Unlock()
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		if err := h.Err(); !errors.Is(err, lease.ErrNotHeld) {
			t.Fatalf("Held of a, whose lease went to b, still live (Err %v) %v after the transfer", err, time.Since(at))
		}
	})
}
