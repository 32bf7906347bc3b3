package signals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestMarkLikeSignalIDsKeepDedupe: signal IDs that happen to start with
// "cancel-mark-" (Send accepts any ID) are signals: their record entries
// keep the DedupeEntries limit. A resend of the 201st of 260 such IDs, to
// another process after the first's tenure ended, is not run again, as
// with plain IDs. Found by review 22: drop marks were told by that prefix,
// so these were kept only 16 deep and the resend ran again (2 of 2 runs on
// 181b329).
func TestMarkLikeSignalIDsKeepDedupe(t *testing.T) {
	for _, prefix := range []string{"plain-", "cancel-mark-"} {
		t.Run(prefix, func(t *testing.T) {
			srv, _ := startRedis(t)
			ctx := context.Background()
			var (
				mu   sync.Mutex
				runs = map[string]int{}
			)
			agent := func(ctx context.Context, run *signals.Run) error {
				mu.Lock()
				defer mu.Unlock()
				for _, s := range run.Signals {
					runs[s.ID]++
				}
				return nil
			}
			count := func(id string) int {
				mu.Lock()
				defer mu.Unlock()
				return runs[id]
			}
			opts := []signals.Option{signals.WithLinger(50 * time.Millisecond)}
			rtA, stopA := urlRuntime(t, srv.URL(), "", "A", agent, nil, opts...)
			const n = 260
			for i := range n {
				if _, err := rtA.Send(ctx, "t", sig(fmt.Sprint(prefix, "u-", i))); err != nil {
					t.Fatal(err)
				}
			}
			for deadline := time.Now().Add(10 * time.Second); count(fmt.Sprint(prefix, "u-", n-1)) == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("signals did not run")
				}
			}
			stopA() // its tenure ends, record written
			rtB, _ := urlRuntime(t, srv.URL(), "", "B", agent, nil, opts...)
			if _, err := rtB.Send(ctx, "t", sig(fmt.Sprint(prefix, "u-200"))); err != nil { // a retried Send, 60 signals back
				t.Fatal(err)
			}
			if _, err := rtB.Send(ctx, "t", sig("probe")); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); count("probe") == 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("probe did not run")
				}
			}
			if c := count(fmt.Sprint(prefix, "u-200")); c != 1 {
				t.Fatalf("signal %su-200 ran %d times, want once (dedupe)", prefix, c)
			}
		})
	}
}
