package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/ackhook"
	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/pubsub"
)

// streamBus is the pubsub half of a Backend: the publish writers, the shared
// fan-out readers, the group subscriptions and the ack batcher. Its
// goroutines start on first use, so a Backend used only for leases runs none.
type streamBus struct {
	b *Backend

	ctx    context.Context // ends when close stops the readers
	cancel context.CancelFunc

	pubQ  lanes[*pubReq]  // publisher.go: coalesces concurrent publishes
	readQ lanes[*readReq] // reads.go: coalesces group subscriptions' reads

	// trimCached: trim.lua was last seen cached on the server, so the
	// publish pipeline sends it as EVALSHA; otherwise as EVAL, which caches
	// it, so that no publish pays a NOSCRIPT fallback round trip.
	trimCached atomic.Bool

	acks acker

	// passes bounds how many on-demand group subscriptions run their
	// periodic pass (group.go's reclaimLoop) at once: see
	// onDemandPasses. On a Cluster client each master has a set of its
	// own (masterPasses, see passSlots); passes is the set of every other
	// client, and of keys whose master the client's map cannot tell.
	passes       chan struct{}
	pmu          sync.RWMutex
	masterPasses map[string]chan struct{} // master address → its pass slots

	// fmu guards what Flush waits for: the last id this Backend wrote to
	// each stream that has a local subscription.
	fmu     sync.Mutex
	subKeys map[string]int    // stream key → local subscriptions on it
	lastPub map[string]string // stream key → last id written here
	// pubN: stream key → how many writes recordWrite took for it (while
	// the key has local subscriptions), so that a check of the stream can
	// tell that none came in since it looked (forgetWritesIfSame).
	pubN map[string]uint64
	// goneTo: stream key → the last id of its stream as this Backend's
	// DeleteTopic deleted it, while the key has local subscriptions: a
	// subscription that joins later, or a group recreated since, never
	// handles the entries up to it (Flush does not wait for them).
	goneTo map[string]string
	// delSeq counts the deletions recorded in goneTo (guarded by fmu): a
	// write sent after the last of them that still gets an id at or below
	// its key's goneTo went to a stream recreated lower (its last id was
	// ahead of the server's clock, then the key was removed by
	// StreamIdleTTL or another process): the mark no longer tells the
	// deleted entries from new ones, and is dropped.
	delSeq uint64
	// goneSeq: stream key → delSeq as its last deletion counted itself
	// (with goneTo): a write whose deletions() is at least this was sent
	// after that deletion, whatever other keys were deleted meanwhile.
	goneSeq map[string]uint64

	mu      sync.Mutex
	subs    map[subscription]struct{}
	readers map[string]*fanReader  // by reader group (readerGroup)
	nodes   map[string]*nodeReader // by nodeReader.key
	// stopping is set (under mu) by close before it waits for bg: no
	// reader starts from then on (readerFor), so bg is never added to
	// while close waits, even from a subscription Shutdown gave up on.
	stopping bool
	bg       sync.WaitGroup // readers and other bus goroutines
}

// subscription is what close stops: a fan-out or a group subscription.
type subscription interface {
	pubsub.Subscription
	// shutdown stops the subscription and waits for it (or ctx); byClose
	// says the Backend's Close calls it. An Unsubscribe of a subscription
	// that Close stopped first returns pubsub.ErrClosed, as inmem's does.
	shutdown(ctx context.Context, byClose bool) error
	// streamKey returns the key of the subscribed stream.
	streamKey() string
	// caughtUp reports whether every entry up to id that this
	// subscription is to handle has been handled (and, for groups, acked).
	caughtUp(ctx context.Context, id string) (bool, error)
}

func (s *streamBus) init(b *Backend) {
	s.b = b
	s.subs = make(map[subscription]struct{})
	s.subKeys = make(map[string]int)
	s.lastPub = make(map[string]string)
	s.pubN = make(map[string]uint64)
	s.goneTo = make(map[string]string)
	s.goneSeq = make(map[string]uint64)
	s.readers = make(map[string]*fanReader)
	s.nodes = make(map[string]*nodeReader)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.acks.init(b)
	s.passes = make(chan struct{}, onDemandPasses)
}

// enter registers a Publish or Subscribe call; it fails with ErrClosed after
// Close. The caller must call s.leave.
func (s *streamBus) enter() error {
	if !s.b.life.Enter() {
		return pubsub.ErrClosed
	}
	return nil
}

// leave ends a call registered by enter.
func (s *streamBus) leave() { s.b.life.Leave() }

// abandoned reports whether a Shutdown gave up on the handlers still
// running: what they return is no longer acked.
func (s *streamBus) abandoned() bool { return s.b.life.Aborted() }

// close runs once the Publish and Subscribe calls in progress have left: it
// stops every subscription (waiting for its handlers and writing its acks),
// stops the readers, flushes the acker and stops the writers. When abort
// closes before every handler has returned, it stops waiting for them and
// marks the bus abandoned (what they return is not acked); stragglers is
// closed once they have returned too.
func (s *streamBus) close(abort <-chan struct{}) (stragglers <-chan struct{}, err error) {
	s.mu.Lock()
	subs := make([]subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	errs := make([]error, len(subs)+1)
	for i, sub := range subs {
		wg.Go(func() { errs[i] = sub.shutdown(context.Background(), true) })
	}
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-abort: // see abandoned
	}

	s.cancel()
	s.mu.Lock()
	s.stopping = true
	for _, d := range s.nodes {
		d.bl.wake()
	}
	s.mu.Unlock()
	s.bg.Wait()

	s.pubQ.wait()  // batches of publishes whose callers gave up waiting
	s.readQ.wait() // and of reads
	select {
	case <-stopped:
		errs[len(subs)] = s.acks.close()
		return stopped, errors.Join(errs...)
	default:
		// Handlers were given up on: errs is still being written.
		return stopped, s.acks.close()
	}
}

// add registers a started subscription. A fan-out subscription that joins
// after this Backend's DeleteTopic of its stream takes the deletion's last
// id as gone (see deletedUpTo, which records goneTo before it looks at the
// subscriptions: one of the two sees the other).
func (s *streamBus) add(sub subscription) {
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	s.fmu.Lock()
	s.subKeys[sub.streamKey()]++
	last, seq := s.goneTo[sub.streamKey()], s.goneSeq[sub.streamKey()]
	s.fmu.Unlock()
	if f, ok := sub.(*fanSub); ok && last != "" {
		f.markGone(last, seq)
	}
}

// goneUpTo returns the last id of the stream key as this Backend's
// DeleteTopic deleted it ("" when none is known).
func (s *streamBus) goneUpTo(key string) string {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.goneTo[key]
}

// remove forgets sub (after it stopped).
func (s *streamBus) remove(sub subscription) {
	s.mu.Lock()
	_, ok := s.subs[sub]
	delete(s.subs, sub)
	s.mu.Unlock()
	if !ok {
		return
	}
	key := sub.streamKey()
	s.fmu.Lock()
	if s.subKeys[key]--; s.subKeys[key] <= 0 {
		delete(s.subKeys, key)
		delete(s.lastPub, key)
		delete(s.pubN, key)
		delete(s.goneTo, key)
		delete(s.goneSeq, key)
	}
	s.fmu.Unlock()
}

// forgetWrites forgets the last id this Backend wrote to the stream key
// when it is at or below upTo: its stream was deleted or recreated lower,
// and what it wrote up to upTo was handed over or is gone. A later write
// (to the stream as it is now) stays a Flush target.
func (s *streamBus) forgetWrites(key, upTo string) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if last, ok := s.lastPub[key]; ok && compareStreamIDs(last, upTo) <= 0 {
		delete(s.lastPub, key)
	}
}

// writeMark returns the last id this Backend wrote to the stream key (""
// when none it waits for) and how many writes to it were recorded, for
// forgetWritesIfSame.
func (s *streamBus) writeMark(key string) (string, uint64) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.lastPub[key], s.pubN[key]
}

// forgetWritesIfSame forgets the last id this Backend wrote to the stream
// key when it is still last and no write to the key was recorded since
// writeMark returned n: the caller saw that the stream, as it was after
// those writes, does not hold last (its last generated id is below it: the
// stream is gone, or was recreated without it). It reports whether it
// forgot it.
func (s *streamBus) forgetWritesIfSame(key, last string, n uint64) bool {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if last == "" || s.lastPub[key] != last || s.pubN[key] != n {
		return false
	}
	delete(s.lastPub, key)
	return true
}

// lastWrite returns the last id this Backend wrote to the stream key ("":
// none it still waits for).
func (s *streamBus) lastWrite(key string) string {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.lastPub[key]
}

// deletions returns delSeq, read before a write is sent (see wrote).
func (s *streamBus) deletions() uint64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.delSeq
}

// wrote records that id was written to the stream key, for Flush; seq is
// deletions() as it was before the write was sent.
func (s *streamBus) wrote(key, id string, seq uint64) {
	if markSeq, stale := s.recordWrite(key, id, seq); stale {
		s.clearGone(key, id, markSeq)
	}
}

// recordWrite is wrote's first step, under fmu: it records id as the key's
// Flush target and, when the write shows the key's deletion mark stale,
// drops the mark (and what was written up to it) and reports the mark's
// deletion count.
func (s *streamBus) recordWrite(key, id string, seq uint64) (markSeq uint64, stale bool) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if g := s.goneTo[key]; g != "" && seq >= s.goneSeq[key] && compareStreamIDs(id, g) <= 0 {
		markSeq, stale = s.goneSeq[key], true
		delete(s.goneTo, key)
		delete(s.goneSeq, key)
		// What this Backend wrote up to the mark went with the deletion
		// (the subscriptions' gone that covered it is cleared below): it
		// is no Flush target any more; this write is.
		if last, ok := s.lastPub[key]; ok && compareStreamIDs(last, g) <= 0 {
			delete(s.lastPub, key)
		}
	}
	if s.subKeys[key] > 0 {
		s.pubN[key]++
		if compareStreamIDs(id, s.lastPub[key]) > 0 {
			s.lastPub[key] = id
		}
	}
	return markSeq, stale
}

// clearGone is wrote's second step: it clears the fan-out subscriptions'
// gone that covers id, when it came from the dropped mark's deletion or an
// earlier one (markSeq), not from a deletion of the key that ran since.
func (s *streamBus) clearGone(key, id string, markSeq uint64) {
	s.mu.Lock()
	var subs []*fanSub
	for sub := range s.subs {
		if f, ok := sub.(*fanSub); ok && f.key == key {
			subs = append(subs, f)
		}
	}
	s.mu.Unlock()
	for _, f := range subs {
		f.r.mu.Lock()
		if f.gone != "" && compareStreamIDs(id, f.gone) <= 0 && f.goneSeq <= markSeq {
			f.gone = ""
		}
		f.r.mu.Unlock()
	}
}

// flush waits until every local subscription has handled the entries this
// Backend wrote to its stream before the call, and their acks are written.
// Subscriptions report progress without notification, so it polls, from
// 1ms up to 20ms between checks.
func (s *streamBus) flush(ctx context.Context) error {
	s.fmu.Lock()
	targets := make(map[string]string, len(s.lastPub))
	for k, v := range s.lastPub {
		targets[k] = v
	}
	s.fmu.Unlock()
	s.mu.Lock()
	var subs []subscription
	for sub := range s.subs {
		if _, ok := targets[sub.streamKey()]; ok {
			subs = append(subs, sub)
		}
	}
	s.mu.Unlock()
	for _, sub := range subs {
		// A ReadOnDemand subscription reads only when told to: Flush
		// waits for its deliveries, so it tells it (others ignore Kick).
		if k, ok := sub.(pubsub.Kicker); ok {
			k.Kick()
		}
	}
	poll := backoff.Backoff{Policy: backoff.Policy{Min: time.Millisecond, Max: 20 * time.Millisecond}}
	for {
		if err := s.acks.flush(ctx, ""); err != nil {
			return err
		}
		rest := subs[:0]
		for _, sub := range subs {
			ok, err := sub.caughtUp(ctx, targets[sub.streamKey()])
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("redisstreams: flush: %w", err)
			}
			if !ok {
				rest = append(rest, sub)
			}
		}
		subs = rest
		if len(subs) == 0 {
			return s.acks.flush(ctx, "")
		}
		if err := backoff.Sleep(ctx, poll.Next()); err != nil {
			return err
		}
	}
}

// Publish stores e on topic: it returns after Redis replied to the event's
// XADD. Concurrent calls are coalesced into pipelines of up to BatchSize
// commands, so many publishers share few round trips; no call returns
// before its own reply. It assigns e.ID and e.CreatedAt when empty.
//
// It returns an error wrapping pubsub.ErrInvalid for an empty topic or type,
// for metadata that is not valid UTF-8, for a CreatedAt outside Unix
// nanoseconds' range (before 1677-09-21 or after 2262-04-11) or for an
// encoded event larger than Options.MaxEventSize; pubsub.ErrClosed after
// Close; the Redis error of the write; with Options.PublishSyncReplicas set, an error wrapping
// ErrNotReplicated when the replicas did not acknowledge the stored event in
// time; or ctx.Err() (wrapped) when ctx ends first, in which case the event
// may or may not have been stored. A client configured with retries
// (go-redis MaxRetries) may store an event twice after a network error;
// handlers deduplicate on Event.ID.
//
// One batch is in flight at a time, so that publishes keep their order. On a
// server that stopped answering, a Publish returns when its ctx ends or when
// the batch it is in fails (the client's timeouts and retries: with
// go-redis's defaults 10s for a lone caller, 35s on a busy client:
// "Clients and deadlines" in the package doc); when a batch fails on a transport error, every
// publish queued behind it fails with it at once, with an error saying it
// was not sent, rather than wait for the same timeouts batch after batch
// (TestQueuedPublishesFailWithTheBatchBefore: 160 publishes on a ctx that
// cannot end, on a stopped server, all returned within 5.0s, where they
// waited up to 45s before). So a Publish on a ctx that cannot end waits for
// about two batches' timeouts at most (the one in flight, then its own), and
// Close, which waits for the calls in progress, with them: review h56 saw
// Close take 35s with 8 publishers on a stopped server. Give Publish a ctx
// with a deadline to bound it.
func (b *Backend) Publish(ctx context.Context, topic string, e pubsub.Event) error {
	return b.publish(ctx, topic, "", e)
}

// PublishFor publishes e to topic like Publish and, in the same round trip,
// creates group at the stream's end ("$", with MKSTREAM) if it does not
// exist, so that trimming keeps e until the group acks it
// (pubsub.GroupPublisher). Both are one script (lua/publish_for.lua), so
// nothing (a drained stream's deletion, say) runs between the two; an
// existing group keeps its position.
func (b *Backend) PublishFor(ctx context.Context, topic, group string, e pubsub.Event) error {
	if group == "" {
		return fmt.Errorf("%w: group name is empty (PublishFor on topic %q)", pubsub.ErrInvalid, topic)
	}
	return b.publish(ctx, topic, group, e)
}

// publish is Publish, and PublishFor when group is set.
func (b *Backend) publish(ctx context.Context, topic, group string, e pubsub.Event) error {
	if err := b.bus.enter(); err != nil {
		return err
	}
	defer b.bus.leave()
	fields, err := b.encodeFor(topic, e)
	if err != nil {
		return err
	}
	return b.bus.publish(ctx, b.keys.Stream(topic), group, fields)
}

var _ pubsub.EventChecker = (*Backend)(nil)

// CheckEvent returns the error Publish and PublishFor would return for
// topic's name or for e, such as an event over Options.MaxEventSize, without
// publishing (pubsub.EventChecker); nil when they would take it. An event
// whose size cannot reach the limit, by a bound on its encoding, is not
// encoded. It does not look at whether the Backend is closed.
func (b *Backend) CheckEvent(topic string, e pubsub.Event) error {
	if encodedBound(e) <= b.opts.MaxEventSize {
		if err := pubsub.ValidateTopic(topic); err != nil {
			return err
		}
		_, err := pubsub.PrepareEvent(e)
		return err
	}
	_, err := b.encodeFor(topic, e)
	return err
}

// encodedBound is at least the size encodeEvent gives e: its strings,
// each metadata byte as a JSON escape of at most 6 bytes, and room for the
// field names, the version, the JSON punctuation and the timestamp.
func encodedBound(e pubsub.Event) int {
	n := 128 + len(e.ID) + len(e.Type) + len(e.RunID) + len(e.Data)
	for k, v := range e.Metadata {
		n += 6*(len(k)+len(v)) + 6
	}
	return n
}

// encodeFor checks topic and e and returns e's stream fields.
func (b *Backend) encodeFor(topic string, e pubsub.Event) ([]string, error) {
	if err := pubsub.ValidateTopic(topic); err != nil {
		return nil, err
	}
	e, err := pubsub.PrepareEvent(e)
	if err != nil {
		return nil, err
	}
	fields, size, err := encodeEvent(e)
	if err != nil {
		return nil, err
	}
	if size > b.opts.MaxEventSize {
		return nil, fmt.Errorf("%w: event %q on topic %q is %d bytes encoded, over the limit of %d bytes (Options.MaxEventSize)",
			pubsub.ErrInvalid, e.ID, topic, size, b.opts.MaxEventSize)
	}
	return fields, nil
}

// PublishBatch publishes ps in order (pubsub.BatchPublisher). When every
// stream is in one place (a standalone or Sentinel client, or one Cluster
// hash slot) it sends them in one pipeline, one round trip, each as an XADD
// or, when Group is set, as PublishFor's script; Redis runs a pipeline's
// commands in order. Otherwise
// (streams in different slots of a Cluster, or on different shards of a
// Ring) it publishes them one after the other, each after the previous
// one's reply. Like Publish, it is coalesced with concurrent publishes: the
// batch goes out in the next pipeline, its commands together and in order.
func (b *Backend) PublishBatch(ctx context.Context, ps []pubsub.Publication) error {
	if err := b.bus.enter(); err != nil {
		return err
	}
	defer b.bus.leave()
	if len(ps) == 0 {
		return nil
	}
	reqs := make([]*pubReq, len(ps))
	one := true
	var node string
	for i, p := range ps {
		fields, err := b.encodeFor(p.Topic, p.Event)
		if err != nil {
			return fmt.Errorf("publication %d: %w", i, err)
		}
		key := b.keys.Stream(p.Topic)
		reqs[i] = &pubReq{key: key, fields: fields, group: p.Group, trim: b.bus.trimDue()}
		if g := b.bus.readerGroup(key); i == 0 {
			node = g
		} else if g != node {
			one = false
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !one {
		for i, r := range reqs {
			if err := b.bus.publish(ctx, r.key, r.group, r.fields); err != nil {
				return fmt.Errorf("redisstreams: publication %d of %d: %w", i, len(reqs), err)
			}
		}
		return nil
	}
	reqs[0].then = reqs[1:]
	return b.bus.publishUnit(ctx, reqs[0])
}

// Subscribe starts delivering the events of topic to h and returns once the
// subscription is in place (see pubsub.Subscriber).
//
// Without pubsub.Group the subscription is fan-out: it reads the stream with
// XREAD from an explicit id, resolved before Subscribe returns (the stream's
// last id for StartFrom(Latest), 0 for Earliest), so no consumer group or
// pending list is created. All fan-out subscriptions of a Backend on a
// standalone or Sentinel client share one blocking connection; on Cluster,
// one per master (see below); on other clients, such as a Ring, each topic
// gets a reader of its own on the client's pool, polling every 100ms at
// most. Each reader, and its goroutines, stops once its last subscription
// or group bell left (TestReadersRetireWithTheirLastSubscription); a new
// subscription wakes it with CLIENT UNBLOCK. A failing fan-out delivery is
// retried locally after pubsub.RedeliveryDelay and, after MaxDeliveries
// attempts, published to the dead-letter topic (pubsub.Policy).
//
// On Cluster a Backend holds at most 4 connections per master blocked in
// a read, however many hash slots its fan-out subscriptions and plain
// group subscriptions use (TestClusterReadersBoundedPerNode: 200 group and
// 40 fan-out subscriptions on 200 slots of a 3-master Cluster, default
// ClusterClient: at most 4 per master, no pool timeout; before, one pooled
// connection per slot ran the default pool of 10 per GOMAXPROCS dry and
// Subscribe failed with "connection pool timeout"). The first 3 slots to
// get a reader on a master get one each, which blocks on its slot for
// BlockTime as on a standalone client (the signals runtime's work and
// control topics, which a 3-master Cluster keeps on one master:
// TestClusterFewSlotsPerMasterBlockAlone); when one of those stops (its
// last subscription left, its slot moved away), a slot of the shared
// reader below takes its place, so a master with at most 3 slots read
// has a reader blocking on each, however its slots came and went
// (TestClusterSharedSlotsGetFreedLanes). Keys of different slots cannot
// share an XREAD, so the other slots share a fourth reader, which reads
// them with one pipeline of non-blocking XREADs (a slot that had entries
// again at once, the others at the poll cadence) and, when nothing came,
// blocks on the slot that last had entries for a short poll, ended with
// CLIENT UNBLOCK: 5ms after entries came to another slot than the last
// one that had some, doubling while none come, up to 50ms. The trade-off:
// an entry in one of those slots, other than the one blocked on, waits up
// to 50ms (less after recent traffic on several slots), plus a few round
// trips, where a reader of its own would have had it at once; a master
// whose shared reader is idle costs about 60 round trips a second per
// Backend instead of one per BlockTime (TestClusterSharedNodeReaderLatency,
// 30 topics on 3 masters, one event at a time, without -race, five runs:
// on the shared readers delivery p50 7.5-12ms, p90 37-40ms, max 51-51.4ms; on
// the slots with a reader of their own p50 0.3ms, max 1.2ms; 58-68 round
// trips per master in an idle second); and a steady flow to one of its
// slots costs a few XREADs per event, plus one per quiet slot per 50ms,
// while the quiet slots' events wait up to the 50ms of an idle node
// (TestClusterBusySlotReadsPerEvent, about 400 events a second to one
// slot and 5 to a quiet one, without -race, three runs: 3.4-3.6 XREADs
// per event beside 20 quiet slots, 6.3-7.4 beside 60, the quiet slot's
// events delivered in 2-48ms; when every slot was read again after each
// event: 20.9-21.1 and 59.4-61.9 XREADs per event, 1.5-5.3ms). See
// BENCHMARKS.md. A slot that moves to another master (a
// failover, a migration) is read by a reader of that master once the old
// one's read failed with a redirection
// (TestClusterReaderFollowsSlotMigration, TestClusterSharedSlotMigrates).
// A slot whose reads fail with an error of its own (-ASK while it
// migrates, -MOVED before the client's slot map caught up, -WRONGTYPE) is
// read again after a delay of its own, 20ms doubling to 2s, while the
// other slots of its reader are read as usual: an event in one of those
// keeps the bounds above (TestClusterMigratingSlotDoesNotStallSharedReader,
// TestClusterWrongTypeSlotDoesNotStallSharedReader); an error of the
// connection or the node makes the reader dial again after that delay,
// for all its slots. On a Ring the reads are not
// bounded per shard: each topic with a fan-out subscription or a plain
// group subscription holds one of the client's pooled connections in each
// of its reads (of 100ms at most), so size RingOptions.PoolSize above the
// number of such topics per shard. A group subscription with
// pubsub.ReadOnDemand holds no bell (it reads when kicked, see below). The
// signals runtime reads its work and control topics (two slots).
//
// With pubsub.Group the subscription is one consumer of a Redis consumer
// group (created with MKSTREAM at "$" for Latest or "0" for Earliest; an
// existing group keeps its position), named Options.Consumer plus a random
// suffix of the Backend and a per-subscription number. It holds no
// connection of its own: it reads with XREADGROUP without BLOCK on the
// client's pool, up to BatchSize entries at a time, again while reads come
// back full; after a short read it waits for the Backend's shared reader
// (the one fan-out subscriptions use, which adds the stream to its XREAD)
// to ring it when the stream gets an entry above the last one it saw (read
// with XREVRANGE in the same pipeline), or for BlockTime at most. So a
// Backend holds one connection blocked in a read on a standalone or Sentinel
// client however many subscriptions it has (TestGroupSubscriptionsShareOneReader:
// 500 group subscriptions, one), and at most 4 per master on Cluster. The reads of a Backend's group
// subscriptions are coalesced like publishes: reads that come while two
// batches are in flight go out together in the next pipeline, so many
// subscriptions reading at once cost a few round trips. With
// pubsub.ReadOnDemand it reads only at the start and when kicked
// (pubsub.Kicker), without a bell, again while a read comes back full and
// short of the stream's last entry (which the read's script returns with
// the entries, read in the same atomic step), and looks for stale entries of
// other consumers only while it is being kicked. It
// acks in batches and redelivers a nacked entry to itself after
// pubsub.RedeliveryDelay (XCLAIM, which counts the attempt); the entry waits
// out its delay holding no handler (with Concurrency(1), to keep the order,
// its handler waits). Every AckDeadline/2 it claims entries that other
// consumers left unacked for AckDeadline. Entries its handlers have not
// started when it is unsubscribed (its last read included: Unsubscribe
// waits for a read already sent) are handed back at once, with their
// delivery count undone, and so are the entries it nacked and was to
// redeliver (also those whose handler failed as it stopped), keeping their
// count: the next delivery is the next attempt. The group's other members
// take them within a BlockTime (a ReadOnDemand member of another process
// at its next pass after a Kick), those of the same Backend and a member
// that subscribes later at once (package doc, "Hand-back"), not after the
// ack deadline. Its consumer is deleted when it stops holding
// nothing, or else by the member that takes its entries over, so consumers
// do not pile up. With
// pubsub.ClaimPending it first walks the group's pending list in id order
// (XPENDING + XCLAIM with no minimum idle time), delivering what other
// consumers hold before any new entry, and reads no further ahead than its
// Concurrency.
//
// Entries that cannot be decoded (written by something other than leasebus)
// are published to the dead-letter topic with their raw fields as Data and
// the reason in pubsub.MetaDeadReason, then acked, and reading goes on.
//
// Bad input returns an error wrapping pubsub.ErrInvalid; after Close,
// pubsub.ErrClosed; a Redis error of the setup is returned as is.
func (b *Backend) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if err := b.bus.enter(); err != nil {
		return nil, err
	}
	defer b.bus.leave()
	cfg, err := pubsub.PrepareSubscribe(topic, h, opts...)
	if err != nil {
		return nil, err
	}
	p := b.bus.policy(topic, h, cfg)
	if cfg.Group != "" {
		return b.bus.subscribeGroup(ctx, p, cfg)
	}
	return b.bus.subscribeFanOut(ctx, p, cfg)
}

// Flush waits until every event this Backend published before the call has
// been handled by this Backend's subscriptions on its topic (fan-out
// subscriptions: handled; group subscriptions: the group has delivered it
// and, if to this Backend, it has been handled and its ack written), and
// until every ack queued before the call is written to Redis. An event a
// handler nacked, waiting here for its redelivery, does not hold it up: it
// was handed to its handler, as pubsub.PubSub.Flush says and package inmem
// does (TestFlushDoesNotWaitForNackedRedelivery; before, Flush waited until
// the event was handled successfully, for ever with a handler that kept
// failing). Deliveries to
// other processes are not waited for, nor are events this Backend's
// DeleteTopic took before a subscription read them: they are gone. An event
// a subscription read before the deletion is still handled, and waited for.
// (After a deletion by another process, or a server that lost its data
// (a restart without persistence, FLUSHALL), Flush does not wait for this
// Backend's events that went unread with the stream once it sees them gone:
// a group subscription at its next poll, when its group has delivered
// every entry the stream holds but not the event, which so is not in it
// (and this Backend's handlers hold none of its entries up to the event);
// a fan-out subscription
// once its reader's check of the stream, every BlockTime, found the stream
// gone or without a single entry ever (a group's MKSTREAM made it again),
// with no write of this Backend since (TestReviewH75FlushAfterWipe: 2.1s
// after the loss at the default BlockTime). Until then, or when the
// stream took entries again, it waits until a later event on the topic
// with a higher id is handled, or its ctx ends; after a failover to a
// server whose clock lags behind the stream's last id, until its ctx
// ends.) It
// returns ctx.Err() when ctx ends first, pubsub.ErrClosed after Close, and
// an error when an ack it waited for was given up on, refused by Redis with
// an error that stays (WRONGTYPE, NOPERM: the entry stays pending and is
// redelivered after its ack deadline; TestReviewH66FlushReportsAckGivenUp).
// An ack Redis cannot be reached for is tried until it is written, so Flush
// then waits for it (or ctx).
func (b *Backend) Flush(ctx context.Context) error {
	if b.isClosed() {
		return pubsub.ErrClosed
	}
	return b.bus.flush(ctx)
}

// policy returns the delivery policy of a subscription to topic.
func (s *streamBus) policy(topic string, h pubsub.Handler, cfg pubsub.SubscribeConfig) *pubsub.Policy {
	return pubsub.NewPolicy(topic, h, cfg, s.publishDead)
}

// publishDead stores the dead letter e on the topic dead. Unlike Publish it
// works while the Backend closes (a subscription that is draining may
// dead-letter), and it makes the metadata valid UTF-8 first: the reason and
// the failed topic may hold any bytes. A dead letter the replicas did not
// acknowledge (PublishSyncReplicas) counts as stored only for a group
// delivery whose ctx carries a *deadNote, on a *redis.Client; see below.
func (s *streamBus) publishDead(ctx context.Context, dead string, e pubsub.Event) error {
	fields, _, err := encodeEvent(validMetadata(e))
	if err != nil {
		return err
	}
	key := s.b.keys.Stream(dead)
	r := &pubReq{key: key, fields: fields, trim: s.trimDue()}
	err = s.publishUnit(ctx, r)
	if errors.Is(err, ErrNotReplicated) {
		// Stored on the master, only not acknowledged by the replicas
		// (PublishSyncReplicas). On one master (*redis.Client), for a
		// group delivery whose ctx carries a deadNote, count it stored,
		// so that the entry is acked rather than redelivered and
		// dead-lettered again for as long as a stall lasts (one copy per
		// redelivery: TestReviewDeadLetterRepeatsDuringStall). The
		// entry's ack must then find the dead letter where it lands: an
		// ack sent through the acker after the master died reached the
		// promoted master, which had the entry but never the dead letter
		// (review AA, TestReviewAADeadLetterAckAfterFailover). So the
		// caller acks with ackIfDead, which acks only while the dead
		// letter is there; a failover that lost it leaves the entry
		// pending, to be dead-lettered again
		// (TestDeadLetterUnsyncedLostInFailover). Without a note (a
		// fan-out subscription, which has no ack to lose with it:
		// TestReviewAADeadLetterFanOutLostInFailover), or on a Cluster,
		// where the dead-letter topic may live on another master, it
		// counts as failed and the event is redelivered.
		_, one := s.b.client.(*redis.Client)
		if n, _ := ctx.Value(deadNoteKey{}).(*deadNote); one && n != nil && r.id != "" {
			n.key, n.id = key, r.id
			return nil
		}
	}
	return err
}

// deadNoteKey is the ctx key of a *deadNote.
type deadNoteKey struct{}

// deadNote records, for a group delivery whose handling ctx carries it,
// the dead letter publishDead counted stored although the replicas did not
// acknowledge it: the entry's ack must then go through ackIfDead.
type deadNote struct {
	key, id string
	// acked is fired once the delivery's ack is finished (written, or
	// given up on): the handler's ctx carries it (internal/ackhook).
	acked ackhook.Hook
}

// ackIfDeadScript acks ARGV[2] of KEYS[1] in group ARGV[1] only while the
// dead letter ARGV[3] is on KEYS[2] (one master: *redis.Client only);
// -1 when it is not.
var ackIfDeadScript = redis.NewScript(`
if #redis.call('XRANGE', KEYS[2], ARGV[3], ARGV[3]) == 0 then return -1 end
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])`)

// ackDelivered acks entry id of the group subscription g after its
// handling returned nil: through the acker, or, when n noted an unsynced
// dead letter, at once and only where that dead letter is (a failover
// that lost it leaves the entry pending, to be dead-lettered again).
//
// Until an ack through the acker is written (or given up on), none of the
// Backend's group subscriptions claims the entry (acker.holds); the sync
// path acks before the entry leaves g.inflight.
func (g *groupSub) ackDelivered(id string, n *deadNote) {
	if n.id == "" {
		g.s.acks.add(g.key, g.group, id, g.cfg.ExpireWhenDrained, &n.acked)
		return
	}
	defer n.acked.Fire()
	ctx, cancel := context.WithTimeout(context.Background(), ackCloseGrace)
	defer cancel()
	res, err := ackIfDeadScript.Run(ctx, g.s.b.client, []string{g.key, n.key}, g.group, id, n.id).Int64()
	if err != nil || res < 0 {
		g.s.b.opts.Logger.Warn("redisstreams: entry not acked: its unacknowledged dead letter is not on the master (lost in a failover?) or the ack failed; it is redelivered after the ack deadline",
			"topic", g.topic, "id", id, "dead", n.id, "err", err)
		return
	}
	// An ack that leaves the stream drained sets its expiry, as the
	// acker's do (TestExpireWhenDrainedDeadLetterAck).
	g.checkDrained(ctx)
}

// deadLetterUndecodable dead-letters the stream entry id of topic, which
// could not be decoded (err), with its raw fields as Data.
//
// note is nil for a fan-out subscription (a dead letter the replicas did
// not acknowledge is an error); a group's, whose ack then goes through
// ackDelivered, records such a dead letter counted stored.
func (s *streamBus) deadLetterUndecodable(topic, id string, values map[string]any, err error, note *deadNote) error {
	s.b.opts.Logger.Warn("redisstreams: undecodable stream entry; dead-lettering it", "topic", topic, "id", id, "err", err)
	ctx, cancel := context.WithTimeout(context.Background(), pubsub.DeadLetterTimeout)
	defer cancel()
	if note != nil {
		ctx = context.WithValue(ctx, deadNoteKey{}, note)
	}
	dead := pubsub.DeadLetterTopic(topic)
	if err := s.publishDead(ctx, dead, undecodableEvent(topic, id, values, err)); err != nil {
		s.b.opts.Logger.Warn("redisstreams: dead letter failed", "topic", topic, "id", id, "err", err)
		return fmt.Errorf("redisstreams: dead-letter entry %s of %q to %q: %w", id, topic, dead, err)
	}
	return nil
}

// retryPolicy paces the retry loops that talk to Redis (reads, acks), so
// that a loop facing a dead server neither spins nor gives up: 20ms doubling
// to 2s, jittered.
var retryPolicy = backoff.Policy{Min: 20 * time.Millisecond, Max: 2 * time.Second, Jitter: true}

// newRetry returns a fresh Backoff of retryPolicy.
func newRetry() backoff.Backoff { return backoff.Backoff{Policy: retryPolicy} }

// isNoGroup reports a NOGROUP reply: the stream or its group is gone.
func isNoGroup(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOGROUP") }

// isTryAgain reports Redis's TRYAGAIN: a command of several keys in a
// migrating Cluster slot whose keys are not all on the node that got it.
func isTryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// isNoSuchKey reports the reply of XINFO STREAM on a missing key.
func isNoSuchKey(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "no such key")
}

// isUnknownCommand reports that the server does not implement a command (a
// fake such as miniredis).
func isUnknownCommand(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}

// isMoved reports a Cluster redirection or a down slot: the node map is
// stale.
func isMoved(err error) bool {
	if err == nil {
		return false
	}
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") ||
		redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "TRYAGAIN")
}

// isNetErr reports a transport error (the connection should be replaced).
func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, redis.ErrClosed) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
}

// lastStreamID returns the last id generated in the stream at key ("0-0"
// when it does not exist). Fan-out subscriptions with StartFrom(Latest)
// start after it.
// startID is lastStreamID for a fan-out Subscribe from Latest, and returns
// when ctx ends, as setupGroup does for a group's setup (its read goes on
// in a goroutine of its own until the client answers or gives up).
func (s *streamBus) startID(ctx context.Context, key string) (string, error) {
	if ctx.Done() == nil {
		return s.lastStreamID(ctx, key)
	}
	var (
		id  string
		err error
	)
	done := make(chan struct{})
	if s.b.awaitSend(ctx, done, func() {
		id, err = s.lastStreamID(ctx, key)
		close(done)
	}) {
		return id, endedWith(ctx, err)
	}
	return "", fmt.Errorf("redisstreams: subscribe to %q: %w", key, ctx.Err())
}

func (s *streamBus) lastStreamID(ctx context.Context, key string) (string, error) {
	info, err := s.b.client.XInfoStream(ctx, key).Result()
	s.b.reloadOnErr(ctx, err)
	switch {
	case err == nil:
		if info.LastGeneratedID != "" {
			return info.LastGeneratedID, nil
		}
		return "0-0", nil
	case isNoSuchKey(err):
		return "0-0", nil
	case isUnknownCommand(err):
		msgs, err := s.b.client.XRevRangeN(ctx, key, "+", "-", 1).Result()
		s.b.reloadOnErr(ctx, err)
		if err != nil {
			return "", fmt.Errorf("redisstreams: xrevrange %q: %w", key, err)
		}
		if len(msgs) == 0 {
			return "0-0", nil
		}
		return msgs[0].ID, nil
	}
	return "", fmt.Errorf("redisstreams: xinfo stream %q: %w", key, err)
}

// readerGroup returns which shared fan-out reader (fanReader) serves the
// stream key: one for the whole standalone (or Sentinel) client, one per
// hash slot on Cluster (keys of different slots cannot share an XREAD), one
// per hash tag on other clients.
func (s *streamBus) readerGroup(key string) string {
	switch s.b.client.(type) {
	case *redis.Client:
		return ""
	case *redis.ClusterClient:
		return fmt.Sprintf("slot:%d", keys.Slot(key))
	default:
		return "tag:" + keys.HashTag(key)
	}
}

// nodeKey returns the node whose node readers (nodeReader) read for the
// fanReader of the stream key: "" (the client's) on a standalone or
// Sentinel client; on Cluster the address of the master that serves the
// key's slot now ("?" when the client's slot map cannot say: then its node
// reader re-homes it when it connects); the hash tag on other clients.
func (s *streamBus) nodeKey(key string) string {
	switch c := s.b.client.(type) {
	case *redis.Client:
		return ""
	case *redis.ClusterClient:
		node, err := c.MasterForKey(s.ctx, key)
		if err != nil {
			return "?"
		}
		return node.Options().Addr
	default:
		return "tag:" + keys.HashTag(key)
	}
}

// reloadCluster refreshes the Cluster slot map after a redirection.
func (s *streamBus) reloadCluster(ctx context.Context) {
	if c, ok := s.b.client.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}
