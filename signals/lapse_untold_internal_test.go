package signals

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
)

// lagUntold is inmem whose GroupBacklog never tells the lag (Lag -1),
// as redisstreams does beyond 10,000 unread entries or after an XDEL; every
// other method and capability is inmem's (embedded).
type lagUntold struct{ *inmem.Backend }

func (b lagUntold) GroupBacklog(ctx context.Context, topic, group string) (pubsub.Backlog, error) {
	bl, err := b.Backend.GroupBacklog(ctx, topic, group)
	if err != nil {
		return bl, err
	}
	bl.Lag = -1
	return bl, nil
}

// TestLapseEntryWhenBacklogUntold: what the lapse watch does once the work
// is done when the backlog cannot be told (a backend whose GroupBacklog
// always answers Lag -1: lagUntold). A ghost holds the thread (a 600ms lease
// it renews); s1 is Forwarded to it, which notes the thread; the ghost runs
// s1 (reads and acks the inbox entry, writes the done record). With a
// backlog that tells (Told), the entry goes at the first try after that,
// within one of the holder's lease periods, and no tenure starts. With one
// that cannot tell, work is taken to wait (TestLapseNotedSignalDoneLagUnknown
// shows why), so the entry is tried at each lapse and goes at the latest
// max(TTL, two recovery intervals) after the notice that found the thread
// held (lapse.go, "State"), and a holder that releases meanwhile
// (LagUnknownReleased) has its drained thread taken by at most one
// Recovered tenure, which ends by itself.
//
// Found by review (rev5, 2026-11-27): the state bound of the docs ("goes
// within one of the holder's lease periods after the work is done") did not
// say what a backlog that cannot be told does since 0f46782.
func TestLapseEntryWhenBacklogUntold(t *testing.T) {
	t.Run("Told", func(t *testing.T) { lapseUntold(t, false, false) })
	t.Run("LagUnknown", func(t *testing.T) { lapseUntold(t, true, false) })
	t.Run("LagUnknownReleased", func(t *testing.T) { lapseUntold(t, true, true) })
}

func lapseUntold(t *testing.T, unknown, release bool) {
	const thread = "untold"
	const gttl = 600 * time.Millisecond
	ib := inmem.New()
	t.Cleanup(func() { ib.Close() })
	var ps pubsub.PubSub = ib
	if unknown {
		ps = lagUntold{ib}
	}
	ctx := context.Background()
	const ttl, recovery = time.Second, 2 * time.Second

	// The ghost holder: renews every 150ms until stopped.
	key := LeaseKey(thread)
	stopGhost := startGhost(t, ib, thread, gttl).kill

	var recovered atomic.Int64
	rt, err := New(ps, func(ctx context.Context, run *Run) error { return nil },
		WithLeaseTTL(ttl), WithRecoveryInterval(recovery), WithLinger(50*time.Millisecond),
		WithObserver(func(e Event) {
			if e.Kind == Recovered && e.Thread == thread {
				recovered.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopGhost()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	})

	sendNoted(t, rt, thread, "s1")

	// The ghost runs s1: it reads and acks the inbox entry and writes the
	// done record; the inbox group has nothing left.
	got := make(chan string, 4)
	sub, err := ib.Subscribe(ctx, InboxTopic(thread), func(ctx context.Context, ev pubsub.Event) error {
		select {
		case got <- ev.ID:
		default:
		}
		return nil
	}, pubsub.Group(InboxGroup), pubsub.StartFrom(pubsub.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the ghost read nothing from the inbox")
	}
	if _, err := writeRecord(ctx, ib, thread, "", []string{"s1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ib.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	real, err := ib.GroupBacklog(ctx, InboxTopic(thread), InboxGroup)
	if err != nil || real.Lag != 0 || real.Pending != 0 {
		t.Fatalf("the inbox after the ghost ran s1: %+v, %v; want nothing left", real, err)
	}
	done := time.Now()

	noted := time.Now() // at the latest: the entry was there before the ghost ran s1
	if release {
		stopGhost()
		_ = ib.ReleaseLease(ctx, key, "ghost/run1")
	}
	bound := gttl + 500*time.Millisecond
	if unknown {
		bound = max(ttl, 2*recovery) + gttl + time.Second
	}
	gone := time.Duration(-1)
	for time.Since(noted) < bound+time.Second {
		if rt.lapse.len() == 0 {
			gone = time.Since(done)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a tenure the last try started has begun
	t.Logf("backlog answers Lag -1: %v, holder released: %v; entry gone %v after the work was done (bound %v); Recovered tenures: %d",
		unknown, release, gone.Round(time.Millisecond), bound, recovered.Load())
	if gone < 0 || gone > bound {
		t.Errorf("the lapse watch entry was not gone within %v of the work being done (gone after %v)", bound, gone)
	}
	switch n := recovered.Load(); {
	case !unknown && n != 0:
		t.Errorf("%d Recovered tenures of a drained thread whose backlog tells; want 0", n)
	case n > 1:
		t.Errorf("%d Recovered tenures of a drained thread; want at most 1", n)
	}
}
