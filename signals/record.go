package signals

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/lease"
)

// The done record of a thread remembers the IDs of its last DedupeEntries
// signals that were run (or skipped as duplicates). It is stored as the owner
// string of the lease key "signals.done.<thread>", written only by the
// thread's lease holder with TransferLease (a compare-and-swap on the owner
// string) and expiring after the dedupe window. This keeps it on the lease
// provider the runtime already has: no other storage is needed.
//
// Format "r2:" followed by comma-separated entries, oldest first. An entry is
// the first 128 bits of the SHA-256 of a signal ID in unpadded base64url (22
// characters), so two different IDs share an entry only by a 128-bit hash
// collision, which nobody can find in practice, crafted or not; the record
// stays bounded at DedupeEntries × 23 bytes (plus recordMarks × 24 for drop
// marks, below) whatever the IDs' lengths.
//
// Records of the first format ("r1:", 48-bit FNV-1a hashes in 12 hex digits)
// are still read: their entries are matched by FNV hash and carried into the
// next record written, where they age out like any entry (after
// DedupeEntries newer IDs or the dedupe window). Until then an ID crafted to
// collide with one of them in 48 bits would be skipped; no new entry is
// written that way. A process of the older version reads an "r2:" record as
// empty: during a rolling upgrade it may run again a signal that a newer
// process already ran (at-least-once, as after an expired record).

func recordKey(thread string) string { return "signals.done." + thread }

const (
	recordPrefix   = "r2:"
	recordPrefixV1 = "r1:"
	// hashLen is the length of an r2 entry; legacyHashLen of an r1 one.
	hashLen       = 22
	legacyHashLen = 12
)

// idHash is the record's entry for a signal ID: SHA-256 truncated to 128
// bits, in unpadded base64url.
func idHash(id string) string {
	var h [hashLen]byte
	idHashTo(&h, id)
	return string(h[:])
}

// idHashTo writes idHash(id) to h, without allocating.
func idHashTo(h *[hashLen]byte, id string) {
	sum := sha256.Sum256([]byte(id))
	base64.RawURLEncoding.Encode(h[:], sum[:16])
}

// legacyIDHash is the entry of an r1 record: 48-bit FNV-1a in hex.
func legacyIDHash(id string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%012x", h.Sum64()&(1<<48-1))
}

// recordEntries returns the entries of rec, oldest first (nil for a record
// of an unknown format or an empty one).
func recordEntries(rec string) []string {
	body := recordBody(rec)
	if body == "" {
		return nil
	}
	return strings.Split(body, ",")
}

// recordBody returns rec's comma-separated entries without the format
// prefix ("" for a record of an unknown format or an empty one).
func recordBody(rec string) string {
	switch {
	case strings.HasPrefix(rec, recordPrefix):
		return rec[len(recordPrefix):]
	case strings.HasPrefix(rec, recordPrefixV1):
		return rec[len(recordPrefixV1):]
	}
	return ""
}

// Drop marks (the inbox events Cancel with DropQueued publishes, told by
// their type) are recorded twice: as any signal, and tagged "m" and kept
// apart from the DedupeEntries limit: the newest recordMarks of them stay
// in the record however many signals ran since, for as long as the record
// lives. A DropQueued request that reaches the owner late must find its
// mark there, or it would start a drop that no mark ends. A process of an
// older version ignores the tagged entries (their length matches neither
// format), reads the untagged one, and carries both in the records it
// writes.
const (
	markTag     = 'm'
	recordMarks = 16
)

// isMark reports whether a record entry is a drop mark's.
func isMark(e string) bool { return len(e) == hashLen+1 && e[0] == markTag }

// recordHas reports whether rec holds id: its 128-bit entry (or, for a drop
// mark, that entry tagged "m") or, for an entry carried over from an r1
// record, its 48-bit FNV entry.
// It walks rec in place: a run checks it for every signal it is given.
func recordHas(rec, id string) bool {
	body := recordBody(rec)
	var (
		h      [hashLen]byte
		hashed bool
		legacy string
	)
	for body != "" {
		e, rest, _ := strings.Cut(body, ",")
		body = rest
		if isMark(e) {
			e = e[1:]
		}
		switch len(e) {
		case hashLen:
			if !hashed {
				idHashTo(&h, id)
				hashed = true
			}
			if e == string(h[:]) {
				return true
			}
		case legacyHashLen:
			if legacy == "" {
				legacy = legacyIDHash(id)
			}
			if e == legacy {
				return true
			}
		}
	}
	return false
}

// recordAdd returns rec with ids appended (those not in it yet), and with
// marks, the IDs among them of drop marks, appended once more tagged, keeping
// the newest DedupeEntries untagged entries and the newest recordMarks
// tagged ones, in order, in the r2 format. A mark is told by its event's
// type, never by its ID (a signal's ID may look like one), and is recorded
// both ways: untagged, as a process of the previous version reads it, and
// tagged, kept apart from the signals.
func recordAdd(rec string, ids, marks []string) string {
	entries := recordEntries(rec)
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e] = true
	}
	for _, id := range ids {
		if recordHas(rec, id) {
			continue
		}
		if h := idHash(id); !seen[h] {
			seen[h] = true
			entries = append(entries, h)
		}
	}
	for _, id := range marks {
		if h := string(markTag) + idHash(id); !seen[h] {
			seen[h] = true
			entries = append(entries, h)
		}
	}
	if len(entries) > DedupeEntries {
		// Keep the newest of each kind, walking from the newest.
		kept := make([]string, 0, DedupeEntries+recordMarks)
		signals, marks := 0, 0
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			switch {
			case isMark(e) && marks < recordMarks:
				marks++
			case !isMark(e) && signals < DedupeEntries:
				signals++
			default:
				continue
			}
			kept = append(kept, e)
		}
		slices.Reverse(kept)
		entries = kept
	}
	next := recordPrefix + strings.Join(entries, ",")
	if next == rec {
		return rec
	}
	return next
}

// recordRetry spaces the tries of a done-record write after a call that
// failed: a connection reset, a call never sent because the one before it
// failed (lease.ErrNotSent), a Cluster slot that migrates (redisstreams
// waits for that itself, within the call's ctx). The tries go on for at
// most recordRetryFor, and not past the write's ctx (the loss deadline of
// the tenure's lease, see session.complete): an error that lasts (a server
// out of memory, say) holds the thread's next run that long, not a TTL.
var recordRetry = backoff.Policy{Min: 20 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: true}

const recordRetryFor = 2 * time.Second

// recordConflicts is how many times writeRecord reads the record again after
// another writer changed it, before it gives up.
const recordConflicts = 5

// writeRecord adds ids to the thread's done record and returns the record
// now stored. cached is the record last read or written. A call that fails
// is tried again (recordRetry) for up to recordRetryFor within ctx, unless
// the provider says the call cannot succeed (bad input, closed, revoked): a
// failed write leaves the IDs out of the record, so that a later duplicate
// Send of one of them, at a process that has not cached it, runs it again.
// A try after a call of unknown outcome is safe: the write is a
// compare-and-swap from the record it read, and a record that already holds
// the IDs ends it.
func writeRecord(ctx context.Context, lp lease.Provider, thread, cached string, ids, marks []string, ttl time.Duration) (string, error) {
	key := recordKey(thread)
	var lastErr error
	bo := backoff.Backoff{Policy: recordRetry}
	var retryCtx context.Context // from the first failure: recordRetryFor
	for conflicts := 0; conflicts < recordConflicts; {
		next := recordAdd(cached, ids, marks)
		if next == cached {
			return cached, nil
		}
		stored, won, err := recordStep(ctx, lp, key, cached, next, ttl)
		if err != nil {
			if !recordRetryable(err) {
				return cached, err
			}
			if retryCtx == nil {
				var cancel context.CancelFunc
				retryCtx, cancel = context.WithTimeout(ctx, recordRetryFor)
				defer cancel()
			}
			if backoff.Sleep(retryCtx, bo.Next()) != nil {
				return cached, err
			}
			continue
		}
		if won {
			return next, nil
		}
		cached = stored
		conflicts++
		lastErr = fmt.Errorf("signals: done record of thread %q changed under its writer", thread)
	}
	return cached, lastErr
}

// recordRetryable reports whether a record write that failed with err may
// succeed when tried again: any error but bad input, a closed provider and
// a revoked tenure. (Unlike outcomeUnknown, a call the provider never sent,
// lease.ErrNotSent, is tried again: it surely did not run.)
func recordRetryable(err error) bool {
	var re *lease.RevokedError
	return !errors.Is(err, lease.ErrInvalid) && !errors.Is(err, lease.ErrClosed) && !errors.As(err, &re)
}

// recordStep is one compare-and-swap of the record at key from cached to
// next: won, or the record found instead.
func recordStep(ctx context.Context, lp lease.Provider, key, cached, next string, ttl time.Duration) (stored string, won bool, err error) {
	if cached == "" {
		r, err := lp.AcquireLease(ctx, key, next, ttl)
		if err != nil {
			return "", false, err
		}
		return r.Owner, r.Acquired, nil
	}
	ok, err := lp.TransferLease(ctx, key, cached, next, ttl)
	if err != nil || ok {
		return "", ok, err
	}
	cur, err := lp.GetLeaseOwner(ctx, key)
	return cur, false, err
}

// doneCache remembers, per process, thread/ID pairs that were run, in a
// bounded FIFO. It spares round trips and is the only record under lease.Noop.
//
// A pair is kept as a 128-bit key: two 64-bit hash/maphash sums of the
// length-prefixed thread and the ID, under two seeds chosen at random per
// cache, so that neither the cache's map nor its ring holds a pointer. (The
// garbage collector then never scans them: with 64Ki pairs of strings they
// were the largest scanned part of a busy runtime's heap, and the collector's
// mark work is what a GC cycle costs the signals it delays.) Two pairs share
// a key only by a 128-bit collision of seeded hashes, which an ID cannot be
// crafted for without the process's seeds; the length prefix keeps
// ("a\x00b", "c") apart from ("a", "b\x00c").
type doneCache struct {
	mu     sync.Mutex
	seeds  [2]maphash.Seed
	set    map[doneKey]struct{}
	ring   []doneKey
	used   []bool
	next   int
	seeded bool
}

// doneKey is one thread/ID pair of the cache, hashed (see doneCache).
type doneKey [2]uint64

const doneCacheSize = 1 << 16

// key returns the cache's key of thread/id. Call with c.mu held.
func (c *doneCache) key(thread, id string) doneKey {
	if !c.seeded {
		c.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
		c.seeded = true
	}
	var k doneKey
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(thread)))
	for i, seed := range c.seeds {
		var h maphash.Hash
		h.SetSeed(seed)
		_, _ = h.Write(n[:])
		_, _ = h.WriteString(thread)
		_, _ = h.WriteString(id)
		k[i] = h.Sum64()
	}
	return k
}

func (c *doneCache) add(thread, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.key(thread, id)
	if c.set == nil {
		c.set = make(map[doneKey]struct{})
		c.ring = make([]doneKey, doneCacheSize)
		c.used = make([]bool, doneCacheSize)
	}
	if _, ok := c.set[k]; ok {
		return
	}
	if c.used[c.next] {
		delete(c.set, c.ring[c.next])
	}
	c.ring[c.next], c.used[c.next] = k, true
	c.next = (c.next + 1) % doneCacheSize
	c.set[k] = struct{}{}
}

func (c *doneCache) has(thread, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		return false
	}
	_, ok := c.set[c.key(thread, id)]
	return ok
}
