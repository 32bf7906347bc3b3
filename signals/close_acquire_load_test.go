package signals_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// TestCloseOnStalledServerUnderAcquireLoad: Close's doc says that when its
// ctx ends, its teardown may take closeGrace (1s) after the last run
// returned and no longer, so on a server that stopped answering it returns
// about a second after the runs did. TestCloseOnStalledServerUnderLoad
// loads 200 threads that stay held (each gets a signal well within the
// linger time), so almost no acquire is in flight when the server stops.
// Here the same load goes to fresh threads (each Send wakes a thread no
// tenure holds), so acquires are in flight, in the lease combiner, when the
// server is stopped (SIGSTOP); Close(ctx 1s) must return within the same 5s.
//
// Found by review (rev2, 2026-11-27): 25.1-35.2s (4 of 4). Runtime.wake
// acquired with keeper.Keep(context.WithoutCancel(ctx), ...), a ctx that
// never ends, after it registered the session in rt.wg, which Close waits
// for, so the acquire was bounded only by go-redis's timeouts and retries;
// and the tenure's inbox Subscribe set its group up on context.Background
// (go-redis's ReadTimeout more, 5s by default in v9.23). Both now end when Close gives up
// (hardCtx; redisstreams' Subscribe setup returns when its ctx ends): 2.0s.
func TestCloseOnStalledServerUnderAcquireLoad(t *testing.T) {
	closeUnderStallLoad(t, "rca", func(n int64) string { return fmt.Sprint("f", n) }, // a thread nobody holds
		signals.WithLinger(200*time.Millisecond))
}
