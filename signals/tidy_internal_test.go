package signals

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// failingDeleter is a pubsub whose DeleteTopicIfDrained fails its first
// fails calls, as a server that does not answer would.
type failingDeleter struct {
	pubsub.PubSub
	fails int
	calls int
}

func (f *failingDeleter) DeleteTopicIfDrained(context.Context, string, string) (bool, error) {
	f.calls++
	if f.calls <= f.fails {
		return false, errors.New("server does not answer")
	}
	return true, nil
}

// TestTidyBacksOff: a drained inbox whose deletion keeps failing is tried
// at once, then after the recovery interval, doubling up to tidyMaxWait
// (a minute), and its entry goes once a deletion succeeded. The clock is
// the now given to tidyDue.
func TestTidyBacksOff(t *testing.T) {
	fd := &failingDeleter{fails: 9}
	rt := &Runtime{ps: fd, dd: fd, cfg: config{recovery: time.Second, ttl: time.Second},
		hardCtx: context.Background(), closing: make(chan struct{}), tidyKick: make(chan struct{}, 1)}
	rt.tidyLater("th")
	now := time.Now()
	var waits []time.Duration
	for range 20 {
		next := rt.tidyDue(now)
		if next.IsZero() {
			break
		}
		if fd.calls > 0 {
			waits = append(waits, next.Sub(now))
		}
		// Nothing is tried before it is due.
		if rt.tidyDue(next.Add(-time.Millisecond)); fd.calls != len(waits) {
			t.Fatalf("tried %d times after %d waits: a try came before it was due", fd.calls, len(waits))
		}
		now = next
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute, time.Minute}
	if len(waits) != len(want) {
		t.Fatalf("waits between tries %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits between tries %v, want %v", waits, want)
		}
	}
	if fd.calls != 10 || len(rt.tidy) != 0 {
		t.Fatalf("%d tries, %d entries left; want 10 tries (9 failed) and no entry", fd.calls, len(rt.tidy))
	}
}
