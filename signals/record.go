package signals

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// The done record of a thread remembers the IDs of its last DedupeEntries
// signals that were run (or skipped as duplicates). It is stored as the owner
// string of the lease key "signals.done.<thread>", written only by the
// thread's lease holder with TransferLease (a compare-and-swap on the owner
// string) and expiring after the dedupe window. This keeps it on the lease
// provider the runtime already has: no other storage is needed.

func recordKey(thread string) string { return "signals.done." + thread }

// idHash is the record's 12-hex-digit form of a signal ID.
func idHash(id string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%012x", h.Sum64()&(1<<48-1))
}

const recordPrefix = "r1:"

func recordHas(rec, id string) bool {
	if !strings.HasPrefix(rec, recordPrefix) {
		return false
	}
	h := idHash(id)
	for e := range strings.SplitSeq(rec[len(recordPrefix):], ",") {
		if e == h {
			return true
		}
	}
	return false
}

// recordAdd returns rec with ids appended (those not in it yet), keeping the
// newest DedupeEntries.
func recordAdd(rec string, ids []string) string {
	var entries []string
	if strings.HasPrefix(rec, recordPrefix) && len(rec) > len(recordPrefix) {
		entries = strings.Split(rec[len(recordPrefix):], ",")
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e] = true
	}
	for _, id := range ids {
		if h := idHash(id); !seen[h] {
			seen[h] = true
			entries = append(entries, h)
		}
	}
	if len(entries) > DedupeEntries {
		entries = entries[len(entries)-DedupeEntries:]
	}
	return recordPrefix + strings.Join(entries, ",")
}

// writeRecord adds ids to the thread's done record and returns the record
// now stored. cached is the record last read or written.
func writeRecord(ctx context.Context, lp lease.Provider, thread, cached string, ids []string, ttl time.Duration) (string, error) {
	key := recordKey(thread)
	var lastErr error
	for range 5 {
		next := recordAdd(cached, ids)
		if next == cached {
			return cached, nil
		}
		if cached == "" {
			r, err := lp.AcquireLease(ctx, key, next, ttl)
			if err != nil {
				return cached, err
			}
			if r.Acquired {
				return next, nil
			}
			cached = r.Owner
			continue
		}
		ok, err := lp.TransferLease(ctx, key, cached, next, ttl)
		if err != nil {
			return cached, err
		}
		if ok {
			return next, nil
		}
		cur, err := lp.GetLeaseOwner(ctx, key)
		if err != nil {
			return cached, err
		}
		cached = cur
		lastErr = fmt.Errorf("signals: done record of thread %q changed under its writer", thread)
	}
	return cached, lastErr
}

// doneCache remembers, per process, thread/ID pairs that were run, in a
// bounded FIFO. It spares round trips and is the only record under lease.Noop.
type doneCache struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

const doneCacheSize = 1 << 16

func (c *doneCache) add(thread, id string) {
	k := thread + "\x00" + id
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = make(map[string]struct{})
		c.ring = make([]string, doneCacheSize)
	}
	if _, ok := c.set[k]; ok {
		return
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.set, old)
	}
	c.ring[c.next] = k
	c.next = (c.next + 1) % doneCacheSize
	c.set[k] = struct{}{}
}

func (c *doneCache) has(thread, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.set[thread+"\x00"+id]
	return ok
}
