package signals

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
)

// TestTenureSeenIsBounded: a tenure kept alive by a steady stream of
// signals (each within the linger time) remembers at most DedupeEntries
// signal IDs in session.seen (found by review: it kept every ID it ran, for
// as long as it lasted), and an ID that left it is still known as run (the
// done record and the process's cache): sent again, it does not run.
func TestTenureSeenIsBounded(t *testing.T) {
	b := inmem.New()
	defer b.Close()
	ran := make(chan string, 10000)
	rt, err := New(b, func(ctx context.Context, run *Run) error {
		for _, s := range run.Signals {
			ran <- s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			ran <- s.ID
		}
	}, WithLinger(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	const n = 5000
	send := func(id string) {
		t.Helper()
		if _, err := rt.Send(context.Background(), "t", Signal{ID: id, Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		send(fmt.Sprint("s", i))
	}
	for range n {
		<-ran
	}
	rt.mu.Lock()
	s := rt.sessions["t"]
	rt.mu.Unlock()
	if s == nil {
		t.Fatal("the tenure ended within its 1m linger")
	}
	s.mu.Lock()
	got, order := len(s.seen), len(s.seenOrder)-s.seenHead
	s.mu.Unlock()
	if got > DedupeEntries || order != got {
		t.Fatalf("one live tenure holds %d signal IDs (%d in order) after %d signals; want at most DedupeEntries (%d)", got, order, n, DedupeEntries)
	}
	// s0 left seen long ago; s1 is sent as a marker after it.
	send("s0")
	send("marker")
	if id := <-ran; id != "marker" {
		t.Fatalf("%s ran again after it left the tenure's memory; want it skipped as run", id)
	}
}
