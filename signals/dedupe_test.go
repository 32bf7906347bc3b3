package signals_test

import (
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// fnv48 is the 48-bit FNV-1a hash the first done-record format stored.
func fnv48(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64() & (1<<48 - 1)
}

// dedupeBackends runs f with a lease-capable backend (done record and
// local cache) and with a pubsub without leases (lease.Noop: the local cache
// is the only record).
func dedupeBackends(t *testing.T, f func(t *testing.T, ps pubsub.PubSub)) {
	t.Run("Leases", func(t *testing.T) { f(t, newBackend(t)) })
	t.Run("Noop", func(t *testing.T) { f(t, onlyPubSub{newBackend(t)}) })
}

// TestDedupeThreadAndIDUnambiguous: thread "a\x00b" running signal "c" must
// not make signal "b\x00c" of thread "a" a duplicate (the cache key once
// joined them with a NUL).
func TestDedupeThreadAndIDUnambiguous(t *testing.T) {
	dedupeBackends(t, func(t *testing.T, ps pubsub.PubSub) {
		rec := newRecorder()
		rt := newRuntime(t, ps, rec.agent)
		if _, err := rt.Send(t.Context(), "a\x00b", sig("c")); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1, 5*time.Second)
		if _, err := rt.Send(t.Context(), "a", sig("b\x00c")); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1, 5*time.Second)
		if got := rec.signals("a"); fmt.Sprintf("%q", got) != `["b\x00c"]` {
			t.Fatalf("thread a ran %q, want [\"b\\x00c\"]", got)
		}
	})
}

// TestDedupeCraftedHashCollision: two IDs whose 48-bit FNV-1a hashes collide
// (found with Floyd's cycle search over x -> fnv48("sig-" + hex(x))) are two
// signals: the second runs after the first on the same thread. The done
// record now stores 128-bit SHA-256 prefixes.
func TestDedupeCraftedHashCollision(t *testing.T) {
	const first, second = "sig-f87cdf6c3cf0", "sig-13a05322b679"
	if fnv48(first) != fnv48(second) {
		t.Fatalf("fnv48(%q) = %x, fnv48(%q) = %x: not a collision", first, fnv48(first), second, fnv48(second))
	}
	dedupeBackends(t, func(t *testing.T, ps pubsub.PubSub) {
		rec := newRecorder()
		rt := newRuntime(t, ps, rec.agent)
		if _, err := rt.Send(t.Context(), "t", sig(first)); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1, 5*time.Second)
		acc, err := rt.Send(t.Context(), "t", sig(second))
		if err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1, 5*time.Second)
		if got := rec.signals("t"); fmt.Sprint(got) != fmt.Sprint([]string{first, second}) {
			t.Fatalf("ran %v (second send: %v), want [%s %s]", got, acc.Action, first, second)
		}
		// And a real duplicate is still skipped.
		if _, err := rt.Send(t.Context(), "t", sig(second)); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Send(t.Context(), "t", signals.Signal{ID: "last", Type: "msg"}); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1, 5*time.Second)
		if got := rec.signals("t"); fmt.Sprint(got) != fmt.Sprint([]string{first, second, "last"}) {
			t.Fatalf("ran %v, want [%s %s last]", got, first, second)
		}
	})
}
