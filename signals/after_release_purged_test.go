package signals_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestKeptInboxPurgedQueueNoTenures: the two idle-thread cases
// fixed separately (an inbox kept by another consumer group,
// TestAfterReleaseNoTenuresForKeptInbox; an operator deleting queued
// signals, TestDeletedQueuedTailIdleNoTenures) together. The inbox is
// kept (another group), and the operator purges it (XTRIM MAXLEN 0) while
// s1 runs and s2 is queued. Nothing is left to run, but XINFO GROUPS
// reports a lag of 1 for signals.owner (entries-added 2, entries-read 1 on
// an empty stream), GroupBacklog passes it on, and afterRelease starts a
// Recovered tenure after every release, forever (review 14 of 2026-11-23:
// 5 tenures in 3s; the deleted s2's notice also recovered the thread every
// recovery interval, up to ten times, since the kept inbox never counted
// as drained). GroupBacklog now checks a positive lag against the entries
// left after the group's last delivered id, and a tenure counts a kept
// inbox as drained when the inbox group has nothing left.
func TestKeptInboxPurgedQueueNoTenures(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	idleAfterQueueEdit(t, "kq", true, func(ctx context.Context, cl *redis.Client, key string) {
		// The operator drops what is queued (and the history) of the thread.
		if err := cl.XTrimMaxLen(ctx, key, 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
}
