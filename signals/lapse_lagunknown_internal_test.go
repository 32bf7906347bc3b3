package signals

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

// TestLapseNotedSignalDoneLagUnknown: TestLapseNotedSignalDone on
// redisstreams when the inbox's backlog cannot be told. The holder ran the
// noted signal (done record, group position past it, nothing pending) and
// died before reading the next entries; more than 10,000 entries wait
// behind it after a deleted one (XDEL), so XINFO GROUPS reports no lag and
// GroupBacklog's own count gives up: Lag -1, Pending 0. The waiting entries'
// notices were handled earlier (they followed the watcher) and are nacked
// until the recovery interval (30s), as in TestLapseNotedSignalDone. The
// thread must be taken over at the lapse (guarantee 5), not when a notice of
// a waiting signal comes back after the recovery interval.
//
// Found by review (rev4, 2026-11-27): lapseWaits fell back to the noted
// signal, found it done and dropped the entry (LagUnknown: no signal run
// 10s after the ghost died, 3 of 3). A backlog that cannot be told now
// counts as work waiting, not told. Told (100 waiting entries, which
// GroupBacklog counts) is the control.
func TestLapseNotedSignalDoneLagUnknown(t *testing.T) {
	t.Run("Told", func(t *testing.T) { lapseLagUnknown(t, 100, 99) })
	t.Run("LagUnknown", func(t *testing.T) { lapseLagUnknown(t, 10_002, -1) })
}

func lapseLagUnknown(t *testing.T, waiting int, wantLag int64) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const thread = "lagunk"
	const gttl = 600 * time.Millisecond

	// The ghost holder: renews until killed, then dies.
	g := startGhost(t, b, thread, gttl)
	kill, died := g.kill, &g.died

	ran := make(chan string, 64)
	rt, err := New(b, func(ctx context.Context, run *Run) error {
		for _, s := range run.Signals {
			select {
			case ran <- s.ID:
			default:
			}
		}
		return nil // one run: what ran first is enough
	}, WithLeaseTTL(15*time.Second), WithRecoveryInterval(30*time.Second), WithLinger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kill()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	})

	sendNoted(t, rt, thread, "s1")
	rt.lapse.mu.Lock()
	noted := rt.lapse.entries[thread].signal
	rt.lapse.mu.Unlock()
	if noted != "s1" {
		t.Fatalf("noted %q, want s1", noted)
	}

	// The waiting entries: signals queued behind s1.
	var pubs []pubsub.Publication
	for i := range waiting {
		pubs = append(pubs, pubsub.Publication{Topic: InboxTopic(thread), Group: InboxGroup,
			Event: pubsub.Event{ID: fmt.Sprint("w", i), Type: "msg"}})
		if len(pubs) == 500 || i == waiting-1 {
			if err := b.PublishBatch(ctx, pubs); err != nil {
				t.Fatal(err)
			}
			pubs = pubs[:0]
		}
	}
	// The holder ran s1: it read and acked it (the group's position is
	// s1's entry, nothing pending) and its done record says so.
	var skey string
	for _, k := range c.Keys(ctx, "*").Val() {
		if strings.Contains(k, InboxTopic(thread)) && c.Type(ctx, k).Val() == "stream" {
			skey = k
		}
	}
	if skey == "" {
		t.Fatalf("no inbox stream among %v", c.Keys(ctx, "*").Val())
	}
	first := c.XRangeN(ctx, skey, "-", "+", 3).Val()
	if len(first) < 3 {
		t.Fatalf("inbox entries: %v", first)
	}
	if err := c.XGroupSetID(ctx, skey, InboxGroup, first[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	// One of the waiting entries deleted (a drop, a trim, an operator): the
	// server cannot tell the lag any more.
	if err := c.XDel(ctx, skey, first[2].ID).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := writeRecord(ctx, b, thread, "", []string{"s1"}, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	bl, err := b.GroupBacklog(ctx, InboxTopic(thread), InboxGroup)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("inbox backlog: %+v (%d entries wait)", bl, waiting-1)
	if bl.Lag != wantLag || bl.Pending != 0 {
		t.Fatalf("setup: backlog %+v, want Lag %d and Pending 0", bl, wantLag)
	}

	time.Sleep(time.Second) // the watch re-notes the live ghost's lapses
	kill()
	select {
	case id := <-ran:
		after := time.Since(time.Unix(0, died.Load()))
		t.Logf("%s ran %v after the ghost stopped renewing (lease %v)", id, after.Round(time.Millisecond), gttl)
		if after > gttl+2400*time.Millisecond {
			t.Fatalf("taken over %v after the ghost died, want within its %v lease + 2.4s", after.Round(time.Millisecond), gttl)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the thread's %d waiting signals not run 10s after the ghost died (lease %v, recovery 30s; lapse entries %d)",
			waiting-1, gttl, rt.lapse.len())
	}
}
