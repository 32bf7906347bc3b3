package redisstreams

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// slotMap is the first load of a Cluster client's map of slots, which the
// first calls of a Backend wait for (awaitSlotMap). The zero value is
// ready.
type slotMap struct {
	done atomic.Bool // the first load ended
	mu   sync.Mutex
	load chan struct{} // closed when the first load ended; nil before it began
}

// awaitSlotMap makes the first calls on a *redis.ClusterClient wait, each
// until its ctx ends at most, for one load of the client's map of slots
// (CLUSTER SLOTS, through MasterForKey), shared by them all and run once
// per Backend, so that they join the lanes of their masters: without a map
// every call joins the zero lane (laneOf), and there a batch for a master
// that stopped answering held up the calls for the others, and several
// such batches in flight at once failed on the client's timeouts one by
// one, where calls queued in a master's own lane behind a failed batch
// fail fast as not sent (TestFreshClusterClientQueuedFailFast, on a loaded
// machine: 404-408 of 600 calls for a stopped master failed fast, 207-212
// in two CI runs, and the healthy calls among them waited 4.2-9.4s; with
// the wait, 598-599 and at most 1.1s). The load goes on in a goroutine
// of its own (counted in b.late, which Shutdown waits for), bounded by the
// client's timeouts; when it fails (no node answers), the calls go on as
// before it, in the zero lane, and go-redis loads the map with their
// commands: so on a fresh client none of whose nodes answers, a first call
// on a ctx that cannot end waits out that load (the client's timeouts on
// each node) and then its own command's. Later calls, and calls on any
// other client, do not wait.
func (b *Backend) awaitSlotMap(ctx context.Context) {
	cc, ok := b.client.(*redis.ClusterClient)
	if !ok || b.slots.done.Load() {
		return
	}
	b.slots.mu.Lock()
	load := b.slots.load
	if load == nil {
		load = make(chan struct{})
		b.slots.load = load
		b.late.add()
		go func() {
			defer b.late.done()
			_, _ = cc.MasterForKey(context.Background(), "")
			b.slots.done.Store(true)
			close(load)
		}()
	}
	b.slots.mu.Unlock()
	select {
	case <-load:
	case <-ctx.Done():
	}
}
