package signals_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/signals"
)

// inboxReads returns a cmdHook that counts the group reads of the inbox
// whose stream key contains marker (read.lua: an EVALSHA whose second key
// is the inbox consumer's read guard), inside pipelines too.
func inboxReads(marker string) *cmdHook {
	return newCmdHook(func(cmd redis.Cmder) bool {
		a := cmd.Args()
		if len(a) < 5 || fmt.Sprint(a[0]) != "evalsha" || fmt.Sprint(a[2]) != "2" {
			return false
		}
		k, g := fmt.Sprint(a[3]), fmt.Sprint(a[4])
		return strings.Contains(k, marker) && strings.Contains(g, ":rguard:")
	})
}

// TestInboxReadOncePerSignal: a signal sent to a thread whose tenure is
// live costs its owner one read of the inbox, not one per piece of news of
// it. The owner hears of each signal up to three times (the local Send's
// kick, its fan-out watch of the wake notice, and the notice's handler when
// it lands in the owner's process); before, each of them read the inbox,
// and the ones after the first found nothing: 2 reads per Delivered signal
// and 1.2–1.5 per Forwarded one (measured with this test on 51198bf: 81 and
// 58 reads for 40 signals each). Now a piece of news of a signal the
// tenure has read already reads nothing (session.kickFor). Every signal
// still runs exactly once.
func TestInboxReadOncePerSignal(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	const n = 40
	ran := make(chan string, 2*n)
	agent := func(ctx context.Context, run *signals.Run) error {
		return eachSignal(ctx, run, func(s signals.Signal) { ran <- s.ID })
	}
	hook := inboxReads("signals.thread.rd1}")
	// A long linger: the tenure stays live between the signals.
	a, _ := urlRuntime(t, srv.URL(), "rd", "A", agent, hook, signals.WithLinger(time.Minute))
	b, _ := urlRuntime(t, srv.URL(), "rd", "B", agent, hook, signals.WithLinger(time.Minute))
	await := func(id string) {
		t.Helper()
		select {
		case got := <-ran:
			if got != id {
				t.Fatalf("ran %q, want %q", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("signal %s did not run within 10s", id)
		}
	}
	// The tenure starts (A's Send wins the lease) and settles.
	if acc, err := a.Send(ctx, "rd1", signals.Signal{ID: "first", Type: "msg"}); err != nil || acc.Action != signals.Woke {
		t.Fatalf("first Send: %+v, %v (want Woke)", acc, err)
	}
	await("first")
	// Let the notices of "first" pass (B's handler may hold one for a
	// poll), so that only the signals below are counted.
	time.Sleep(300 * time.Millisecond)
	for _, c := range []struct {
		from *signals.Runtime
		want signals.Action
	}{{a, signals.Delivered}, {b, signals.Forwarded}} {
		before := hook.n.Load()
		for i := range n {
			id := fmt.Sprintf("%v-%d", c.want, i)
			acc, err := c.from.Send(ctx, "rd1", signals.Signal{ID: id, Type: "msg"})
			if err != nil || acc.Action != c.want {
				t.Fatalf("Send %s: %+v, %v (want %v)", id, acc, err, c.want)
			}
			await(id)
			// The later news of the signal (the notice's watch and
			// handler) comes within a few ms of its run.
			time.Sleep(20 * time.Millisecond)
		}
		reads := hook.n.Load() - before
		t.Logf("%v: %d inbox reads for %d signals", c.want, reads, n)
		// One read per signal; a few more when news of a signal comes
		// while the read that takes it is in flight (its Send's kick
		// then cannot tell that the read will return it).
		if limit := n + n/4; reads > int64(limit) {
			t.Errorf("%v: %d inbox reads for %d signals sent one at a time, want at most %d", c.want, reads, n, limit)
		}
	}
	select {
	case id := <-ran:
		t.Errorf("signal %s ran a second time", id)
	case <-time.After(200 * time.Millisecond):
	}
}
