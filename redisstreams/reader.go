package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/pubsub"
)

// nodeFunc returns the client of the node a blocking connection must talk to.
type nodeFunc func(ctx context.Context) (*redis.Client, error)

// pollBlock caps a blocking read when the connection cannot be woken with
// CLIENT UNBLOCK (a Ring, or a server without CLIENT ID such as miniredis).
const pollBlock = 100 * time.Millisecond

// blocker owns one dedicated connection for the shared reader's blocking
// XREAD that another goroutine can interrupt: wake sends CLIENT
// UNBLOCK with the connection's id over the node's ordinary pool. go-redis
// does not abort a blocking read when its ctx is cancelled, so this is how
// new subscriptions are picked up at once and how Unsubscribe and Close
// return without waiting out BlockTime.
//
// The owner brackets each blocking call with arm and disarm and reads its
// inputs after arm: a change made before arm is seen by the read, a change
// made after it is followed by an unblock.
type blocker struct {
	b    *Backend
	node nodeFunc // nil: no dedicated connection, use the client's pool

	mu       sync.Mutex
	conn     *redis.Conn
	nodeCli  *redis.Client
	clientID int64 // 0: cannot be unblocked
	blocking bool
	gen      uint64
	// dirty is set by wake and cleared by arm: a wake that came while the
	// owner was still getting its connection (no client id to unblock
	// yet) is seen by fresh, and the owner reads its inputs again instead
	// of blocking for BlockTime without them.
	dirty bool

	kick chan struct{} // wake tokens for the waker goroutine and idle owners
}

func newBlocker(b *Backend, node nodeFunc) *blocker {
	return &blocker{b: b, node: node, kick: make(chan struct{}, 1)}
}

// cmd returns what to run the blocking read on and the BLOCK time to use.
func (bl *blocker) cmd(ctx context.Context) (redis.Cmdable, time.Duration, error) {
	block := bl.b.opts.BlockTime
	if bl.node == nil {
		return bl.b.client, min(block, pollBlock), nil
	}
	bl.mu.Lock()
	conn, id := bl.conn, bl.clientID
	bl.mu.Unlock()
	if conn == nil {
		cli, err := bl.node(ctx)
		if err != nil {
			return nil, 0, err
		}
		conn = cli.Conn()
		id, err = conn.ClientID(ctx).Result()
		switch {
		case err == nil:
		case isUnknownCommand(err):
			id = 0
		default:
			_ = conn.Close()
			return nil, 0, err
		}
		bl.mu.Lock()
		bl.conn, bl.nodeCli, bl.clientID = conn, cli, id
		bl.mu.Unlock()
	}
	if id == 0 {
		block = min(block, pollBlock)
	}
	return conn, block, nil
}

// reset drops the connection after an error; the next cmd dials anew.
func (bl *blocker) reset() {
	bl.mu.Lock()
	conn := bl.conn
	bl.conn, bl.nodeCli, bl.clientID = nil, nil, 0
	bl.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// canUnblock reports whether the blocker's connection can be woken with
// CLIENT UNBLOCK (it has a client id).
func (bl *blocker) canUnblock() bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return bl.clientID != 0
}

// connected reports whether the blocker holds its dedicated connection.
func (bl *blocker) connected() bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return bl.conn != nil
}

func (bl *blocker) arm() {
	bl.mu.Lock()
	bl.blocking = true
	bl.dirty = false
	bl.gen++
	bl.mu.Unlock()
}

// fresh reports, between arm and the blocking call, whether no wake came
// since arm: when one did, the owner must disarm and read its inputs again.
// A wake after fresh is handled by the waker's CLIENT UNBLOCK, which
// retries until the read reached the server.
func (bl *blocker) fresh() bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return !bl.dirty
}

func (bl *blocker) disarm() {
	bl.mu.Lock()
	bl.blocking = false
	bl.mu.Unlock()
}

// wake makes the owner re-read its inputs soon: an idle owner waiting on
// kick returns, and a blocked read is unblocked by the waker goroutine.
func (bl *blocker) wake() {
	bl.mu.Lock()
	bl.dirty = true
	bl.mu.Unlock()
	select {
	case bl.kick <- struct{}{}:
	default:
	}
}

// waker runs beside the owner until done closes: on each kick it unblocks
// the owner's read if one is in progress. CLIENT UNBLOCK answers 0 when the
// read has not reached the server yet, so it retries for a short while.
func (bl *blocker) waker(kickOut chan<- struct{}, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-bl.kick:
		}
		select { // pass the token on to an owner waiting idle
		case kickOut <- struct{}{}:
		default:
		}
		bl.unblock(done)
	}
}

func (bl *blocker) unblock(done <-chan struct{}) {
	bl.mu.Lock()
	blocking, gen, id, cli := bl.blocking, bl.gen, bl.clientID, bl.nodeCli
	bl.mu.Unlock()
	if !blocking || id == 0 || cli == nil {
		return
	}
	deadline := time.Now().Add(250 * time.Millisecond)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := cli.ClientUnblock(ctx, id).Result()
		cancel()
		if err != nil || n == 1 || time.Now().After(deadline) {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
		}
		bl.mu.Lock()
		still := bl.blocking && bl.gen == gen && bl.clientID == id
		bl.mu.Unlock()
		if !still {
			return
		}
	}
}

// fanReader is the shared reader of one reader group (see
// streamBus.readerGroup: the whole client on a standalone or Sentinel
// client, one hash slot on Cluster, one hash tag on a Ring): it reads with
// XREAD every stream its fan-out subscriptions read or a group subscription
// waits on, each from the smallest cursor among the fan-out subscriptions
// that have room and the group subscriptions' bells; it hands each entry to
// the fan-out subscriptions whose cursor is behind it and rings the bells
// behind the newest entry of each stream (the group subscription then reads
// with XREADGROUP itself). Its reads are made by the node reader that
// serves it (nodeReader: one goroutine and one connection per Redis node),
// one read at a time.
type fanReader struct {
	s     *streamBus
	group string // its key in streamBus.readers (readerGroup)
	key   string // a stream key of its group: where its node is looked up

	// node is the node reader that reads for it now. It changes only when
	// that node reader moves it, between two of its reads: its hash slot
	// went to another master (nodeReader.rehome, nodeReader.slotFailed),
	// or a lane of its master came free (nodeReader.promoteSlots).
	node atomic.Pointer[nodeReader]

	mu      sync.Mutex
	streams map[string]*fanStream
	// retired (guarded by mu) is set once the reader served no stream any
	// more and was taken out of streamBus.readers (retireIfIdle): nothing
	// may be added to it, and its node reader forgets it.
	retired bool
	// readSeq numbers the XREADs as they start; doneSeq is the last one
	// over, its entries handed over (guarded by mu).
	readSeq, doneSeq uint64

	// lastCheck is when checkStreams last looked at its streams; lastData
	// when a read of it last returned entries. Both belong to the node
	// reader that reads for it.
	lastCheck, lastData time.Time
	// retryAt is when its next read may be made after its XREAD failed
	// with an error of its own hash slot (slotError: -ASK while the slot
	// migrates, -MOVED, -TRYAGAIN, -WRONGTYPE...); retry spaces those
	// reads out. Its node reader reads its other fanReaders meanwhile,
	// without backing off (nodeReader.slotFailed). Both belong to the node
	// reader that reads for it.
	retryAt time.Time
	retry   backoff.Backoff
	// dueAt is when poll reads it next, pollWait after a read that found
	// nothing, and hot whether its last read returned entries (read it
	// again at once; nodeReader.poll). Both belong to the node reader
	// that reads for it. woken is set by wake: read it at once.
	dueAt time.Time
	hot   bool
	woken atomic.Bool
}

// wake makes the node reader of r read r's inputs again soon.
func (r *fanReader) wake() {
	r.woken.Store(true)
	r.node.Load().bl.wake()
}

// nodeReader makes the reads of fanReaders of one Redis node: one
// goroutine, one dedicated blocking connection (blocker) and its waker
// goroutine. On a standalone or Sentinel client there is one, for the
// single fanReader; on a Ring one per hash tag, for that tag's fanReader.
// On Cluster there are up to clusterLanes per master (streamBus.placeLocked):
// the first hash slots to get a reader on a master get a node reader each,
// the others share the last one, which hands one of them to a node reader
// of its own when one of those retires (promoteSlots). Keys of different slots cannot share one
// XREAD (CROSSSLOT), so a node reader serving several slots reads them
// with one pipeline of non-blocking XREADs, one per slot with entries to
// read that is due (a slot that had entries at once, the others at the
// poll cadence, pollWait), and when none returned anything it blocks on
// one of them for a short poll, until the next slot is due (clusterPoll
// at most). A node reader serving a single slot blocks for BlockTime as the
// others do. So a Backend holds at most clusterLanes connections per node
// blocked in a read, however many slots its subscriptions use. An XREAD
// that fails with an error of its slot (slotError) delays only that
// slot's next read (slotFailed); any other error fails the node reader's
// read as a whole: it drops its connection and waits (fail).
type nodeReader struct {
	s       *streamBus
	bl      *blocker
	node    string               // the node it reads (nodeKey)
	key     string               // its key in streamBus.nodes: node, or node#lane for a Cluster slot's own
	cluster *redis.ClusterClient // nil unless on Cluster: its fanReaders are re-homed after errors
	quit    chan struct{}        // closed when it is retired
	done    chan struct{}        // closed when its loop returned (never, for one made while closing)
	idle    chan struct{}        // kicks passed on by the waker

	// members are the fanReaders it reads for; retired is set once it
	// serves none any more and was taken out of streamBus.nodes (no
	// fanReader is added to it from then on). Both guarded by
	// streamBus.mu.
	members map[*fanReader]struct{}
	retired bool

	// dialKey is a stream key of one of the fanReaders of the current
	// read, for its connection on Cluster (clusterNode). Loop only.
	dialKey string
	// pollWait is the cadence of poll: how long after its last read a
	// slot is read again, and how long poll's blocking read lasts at
	// most; clusterPollMin after entries came to a slot other than
	// lastHot, the last one that had some, doubling with each poll that
	// found none, up to clusterPoll (gotData). Loop only.
	pollWait time.Duration
	lastHot  *fanReader
	// promote is set when a lane of its master retired (retireNodeLocked):
	// the shared node reader of a Cluster master then hands fanReaders to
	// the free lanes, between two of its reads (nodeReader.promote).
	promote atomic.Bool
}

// clusterPollMin and clusterPoll bound the cadence of a node reader that
// serves several Cluster hash slots (see nodeReader.poll): a slot whose
// read found nothing is read again pollWait later, and the blocking read
// lasts until the next slot is due; pollWait is clusterPollMin after
// entries came to a slot other than the last one that had some, and
// doubles with each poll that found none, up to clusterPoll. A slot that
// returned entries is read again at once. So an entry in a slot other
// than the one the node reader blocks on waits up to clusterPoll (while
// the node was idle or busy with one slot; less after recent traffic on
// other slots), plus a round trip, before its read; each poll of an idle
// node costs three round trips: one pipeline of one non-blocking XREAD per
// slot read, the blocking XREAD and the CLIENT UNBLOCK that ends it; and
// entries coming to one slot cost a few XREADs each, plus one XREAD per
// quiet slot per clusterPoll (TestClusterSharedNodeReaderLatency,
// TestClusterBusySlotReadsPerEvent; see Backend.Subscribe).
const (
	clusterPollMin = 5 * time.Millisecond
	clusterPoll    = 50 * time.Millisecond
)

// clusterLanes is how many node readers, each with its connection blocked
// in a read, a Backend runs at most per Cluster master: the first
// clusterLanes-1 hash slots to get a reader on a master (the signals
// runtime's work and control topics, say, which a 3-master Cluster keeps
// on one master) each have one of their own and block as on a standalone
// client; the others share the last, which polls them when it serves
// several. Backend.Subscribe's doc and doc.go quote these numbers (4, 3,
// 5ms, 50ms): change them together.
const clusterLanes = 4

type fanStream struct {
	key, topic string
	subs       []*fanSub
	bells      []*groupSub // group subscriptions waiting for an entry above their bellCursor
	// readFrom is the cursor the current XREAD reads this stream from (""
	// when it does not read it): dispatch hands entries only to the
	// subscriptions whose cursor is at or above it, the ones the read
	// covers. Guarded by fanReader.mu.
	readFrom string
}

// fanSub is one fan-out subscription.
type fanSub struct {
	s     *streamBus
	r     *fanReader
	st    *fanStream
	topic string
	key   string
	p     *pubsub.Policy
	cfg   pubsub.SubscribeConfig

	cursor string // last entry id handed over; guarded by r.mu
	// floor (guarded by r.mu) is the highest cursor this subscription had
	// when its stream was found deleted or recreated lower (checkStreams):
	// entries up to it were handed over or are gone, so a Flush waiting for
	// them is done.
	floor string
	// gone (guarded by r.mu) is the last id of the stream as DeleteTopic of
	// this Backend deleted it: entries up to it that this subscription had
	// not read are gone, and a Flush waiting for them is done, once the
	// reader has finished every read it started before (doneSeq reached
	// goneAfter): such a read may still bring entries read before the
	// deletion, to be handled first.
	gone      string
	goneAfter uint64
	goneSeq   uint64 // the latest deletion (streamBus.delSeq) that set gone
	// deleted (guarded by r.mu) is the highest last id of the stream that
	// a DeleteTopic of this Backend deleted, while the stream was numbered
	// as in epoch deletedEpoch; unlike gone it is not cleared. A failed
	// delivery of an entry read in that epoch up to it, or in an earlier
	// epoch, is not delivered again (pubsub.TopicDeleter; a stream made
	// again by a publish numbers its entries above it).
	deleted      string
	deletedEpoch uint64
	// epoch (guarded by r.mu) counts the times checkStreams found the
	// stream made again with ids below the cursor (a server whose clock
	// lags, after the stream went): ids of different epochs are not
	// comparable (TestReviewH77FanoutRetryAfterDeletedMarkWithLowerIDs).
	epoch uint64
	full  atomic.Bool  // ch was full: the reader skips it until drained
	busy  atomic.Int64 // entries handed over and not yet handled
	ch    chan fanMsg

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
	// byClose: the Backend's Close stopped the subscription first. Set in
	// once, read after done.
	byClose bool
}

// testChannelFull, when set by a test, runs in the reader after a
// subscription's channel was found full during a dispatch.
var testChannelFull atomic.Pointer[func()]

// testReaderFound, when set by a test, runs in Subscribe (fan-out) between
// finding the shared reader and attaching to it.
var testReaderFound atomic.Pointer[func()]

type fanMsg struct {
	id    string
	ev    pubsub.Event
	epoch uint64 // the subscription's epoch when it was read
}

// readerFor returns the running shared reader for the stream key, starting
// it (and its node reader) when needed; once the bus is stopping, one that
// is never read.
func (s *streamBus) readerFor(key string) *fanReader {
	group := s.readerGroup(key)
	s.mu.Lock()
	r := s.readers[group]
	s.mu.Unlock()
	if r != nil {
		return r
	}
	node := s.nodeKey(key) // on Cluster, a look at the client's slot map
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.readers[group]; r != nil {
		return r
	}
	r = &fanReader{
		s:       s,
		group:   group,
		key:     key,
		streams: make(map[string]*fanStream),
		retry:   newRetry(),
	}
	if s.stopping {
		// Closing: a reader that is never read (its callers are stopping
		// too), on a node reader that is not started, so close's wait
		// for bg is not raced.
		r.node.Store(s.newNodeReader(node, node))
		return r
	}
	s.readers[group] = r
	d := s.placeLocked(node)
	d.members[r] = struct{}{}
	r.node.Store(d)
	return r
}

// newNodeReader returns a node reader for node (see nodeKey), to be kept
// under key in s.nodes, not started.
func (s *streamBus) newNodeReader(node, key string) *nodeReader {
	d := &nodeReader{
		s:        s,
		node:     node,
		key:      key,
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		idle:     make(chan struct{}, 1),
		members:  make(map[*fanReader]struct{}),
		pollWait: clusterPollMin,
	}
	var dial nodeFunc
	switch c := s.b.client.(type) {
	case *redis.Client:
		dial = func(context.Context) (*redis.Client, error) { return c, nil }
	case *redis.ClusterClient:
		d.cluster = c
		dial = d.clusterNode
	}
	d.bl = newBlocker(s.b, dial)
	return d
}

// placeLocked returns the running node reader a new fanReader of node
// (see nodeKey) is to be read by, starting it when needed: on Cluster, a
// node reader of its own when the master has fewer than clusterLanes-1
// (node#1, node#2...), or else the one the others share (node); on other
// clients, the one of node. The caller holds s.mu, and s is not stopping.
func (s *streamBus) placeLocked(node string) *nodeReader {
	if _, ok := s.b.client.(*redis.ClusterClient); ok {
		for lane := 1; lane < clusterLanes; lane++ {
			if key := fmt.Sprintf("%s#%d", node, lane); s.nodes[key] == nil {
				return s.nodeLocked(node, key)
			}
		}
	}
	return s.nodeLocked(node, node)
}

// nodeLocked returns the running node reader of node under key in s.nodes,
// starting it when needed. The caller holds s.mu, and s is not stopping.
func (s *streamBus) nodeLocked(node, key string) *nodeReader {
	if d := s.nodes[key]; d != nil {
		return d
	}
	d := s.newNodeReader(node, key)
	s.nodes[key] = d
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		defer close(d.done)
		d.loop()
	}()
	go func() {
		defer s.bg.Done()
		d.bl.waker(d.idle, d.done)
	}()
	return d
}

// retireNodeLocked stops the node reader d and forgets it when it reads
// for no fanReader any more. The caller holds s.mu.
func (s *streamBus) retireNodeLocked(d *nodeReader) {
	if len(d.members) > 0 || d.retired || s.nodes[d.key] != d {
		return
	}
	d.retired = true
	delete(s.nodes, d.key)
	close(d.quit)
	d.bl.wake() // out of a read it may still be blocked in
	if shared := s.nodes[d.node]; shared != nil && d.key != d.node {
		// A lane of the master is free: its shared node reader hands it a
		// slot (nodeReader.promote).
		shared.promote.Store(true)
		shared.bl.wake()
	}
}

func (s *streamBus) subscribeFanOut(ctx context.Context, p *pubsub.Policy, cfg pubsub.SubscribeConfig) (pubsub.Subscription, error) {
	topic := p.Topic()
	key := s.b.keys.Stream(topic)
	cursor := "0-0"
	if cfg.StartFrom == pubsub.Latest {
		id, err := s.startID(ctx, key)
		if err != nil {
			return nil, err
		}
		cursor = id
	}
	size := max(s.b.opts.BatchSize, 2*cfg.Concurrency, 2)
	sub := &fanSub{
		s:      s,
		topic:  topic,
		p:      p,
		cfg:    cfg,
		cursor: cursor,
		ch:     make(chan fanMsg, size),
		done:   make(chan struct{}),
	}
	sub.ctx, sub.cancel = context.WithCancel(context.Background())
	for range cfg.Concurrency {
		sub.wg.Add(1)
		go sub.work()
	}
	sub.key = key
	r := s.readerFor(key)
	if hook := testReaderFound.Load(); hook != nil {
		(*hook)()
	}
	r.mu.Lock()
	for r.retired { // its last subscription left meanwhile: a new reader
		r.mu.Unlock()
		r = s.readerFor(key)
		r.mu.Lock()
	}
	sub.r = r
	st := r.streams[key]
	if st == nil {
		st = &fanStream{key: key, topic: topic}
		r.streams[key] = st
	}
	st.subs = append(st.subs, sub)
	sub.st = st
	r.mu.Unlock()
	s.add(sub) // after sub.r is set: flush and deletedUpTo use it
	r.wake()
	return sub, nil
}

// Topic returns the subscribed topic.
func (f *fanSub) Topic() string { return f.topic }

// Unsubscribe stops deliveries and waits for running handlers (or ctx).
func (f *fanSub) Unsubscribe(ctx context.Context) error { return f.shutdown(ctx, false) }

func (f *fanSub) shutdown(ctx context.Context, byClose bool) error {
	f.once.Do(func() {
		f.byClose = byClose
		r := f.r
		r.mu.Lock()
		st := f.st
		for i, x := range st.subs {
			if x == f {
				st.subs = append(st.subs[:i], st.subs[i+1:]...)
				break
			}
		}
		if len(st.subs) == 0 && len(st.bells) == 0 {
			delete(r.streams, st.key)
		}
		idle := len(r.streams) == 0
		r.mu.Unlock()
		if idle {
			f.s.retireIfIdle(r)
		}
		f.cancel()
		go func() {
			f.wg.Wait()
			f.s.remove(f)
			close(f.done)
		}()
	})
	select {
	case <-f.done:
		return f.result(byClose)
	case <-ctx.Done():
		select {
		case <-f.done: // stopped already: the same answer whatever ctx
			return f.result(byClose)
		default:
			return ctx.Err()
		}
	}
}

// result is what a call that stopped f or waited for it to stop returns:
// pubsub.ErrClosed to an Unsubscribe when the Backend's Close stopped f
// first, else nil.
func (f *fanSub) result(byClose bool) error {
	if f.byClose && !byClose {
		return pubsub.ErrClosed
	}
	return nil
}

// work is one handler goroutine; it returns when the subscription stops.
func (f *fanSub) work() {
	defer f.wg.Done()
	f.loop()
}

// loop hands the subscription's entries to handle until it stops.
func (f *fanSub) loop() {
	for {
		var m fanMsg
		select {
		case <-f.ctx.Done():
			return
		case m = <-f.ch:
		}
		if f.ctx.Err() != nil {
			// Stopped as it took m (select picks either when both are
			// ready): Unsubscribe stopped deliveries, so m is dropped with
			// the subscription, unstarted, as the group members and inmem
			// do (TestReviewH60FanOutStartsNothingAfterUnsubscribe).
			f.busy.Add(-1)
			return
		}
		if f.full.Load() && len(f.ch) <= cap(f.ch)/2 && f.full.CompareAndSwap(true, false) {
			f.r.wake()
		}
		f.handle(m, 1)
		f.busy.Add(-1)
	}
}

func (f *fanSub) streamKey() string { return f.key }

// caughtUp reports whether the reader has handed over every entry up to id
// and the handlers have finished them.
func (f *fanSub) caughtUp(_ context.Context, id string) (bool, error) {
	select {
	case <-f.done:
		return true, nil
	default:
	}
	f.r.mu.Lock()
	cursor, floor := f.cursor, f.floor
	covered := f.gone != "" && compareStreamIDs(f.gone, id) >= 0
	gone := covered && f.r.doneSeq >= f.goneAfter
	f.r.mu.Unlock()
	if covered && !gone {
		// A read started before the deletion may have reached the server
		// after it, past the waker's unblock retries: unblock it again.
		f.r.wake()
	}
	reached := compareStreamIDs(cursor, id) >= 0 || (floor != "" && compareStreamIDs(floor, id) >= 0) || gone
	return reached && f.busy.Load() == 0, nil
}

// handle delivers one entry under the subscription's policy from attempt
// from, redelivering it locally after each failed attempt (the policy
// dead-letters it after MaxDeliveries attempts). An unsubscribed
// subscription drops it, and so does one whose topic a DeleteTopic of this
// Backend deleted after the entry was read (pubsub.TopicDeleter: a delivery
// in flight finishes, and is not delivered again).
//
// Each attempt gets its own copy of the event: m.ev is shared with the
// other fan-out subscriptions that got the entry from the same read, and a
// handler may change its event's Data and Metadata.
//
// A handler that ends its goroutine instead of returning (runtime.Goexit,
// as testing's FailNow does) ends this handler goroutine: that attempt has
// failed (pubsub.ErrHandlerExited), and a new handler goroutine redelivers
// m after the delay and then takes this one's place, so that the
// subscription keeps its Concurrency and Flush does not wait for it
// forever (pubsubtest's GoexitRedelivers).
func (f *fanSub) handle(m fanMsg, from int) {
	attempt := from
	returned := false
	defer func() {
		if returned {
			return
		}
		f.wg.Add(1) // before this goroutine's Done: Unsubscribe waits for both
		go func() {
			defer f.wg.Done()
			if !f.wasDeleted(m) && f.redeliverAfter(attempt) {
				f.handle(m, attempt+1)
			}
			f.busy.Add(-1)
			f.loop()
		}()
	}()
	for ; ; attempt++ {
		e := cloneEvent(m.ev)
		e.DeliveryAttempt = attempt
		if f.p.Handle(f.ctx, e) == nil || f.ctx.Err() != nil || f.wasDeleted(m) {
			returned = true
			return
		}
		if !f.redeliverAfter(attempt) {
			returned = true
			return
		}
	}
}

// redeliverAfter waits out the redelivery delay of the failed attempt
// attempt; false when the subscription stopped first. While it waits, the
// entry does not hold Flush up (pubsub.PubSub.Flush: deliveries handed to
// handlers).
func (f *fanSub) redeliverAfter(attempt int) bool {
	f.busy.Add(-1)
	err := backoff.Sleep(f.ctx, f.p.RedeliveryDelay(attempt))
	f.busy.Add(1)
	return err == nil
}

// retireIfIdle stops the reader r and forgets it when it serves no stream
// any more (its last subscription or bell left), so that a Backend keeps
// no reader, and no goroutine, for the hash slots (Cluster) or tags (other
// clients) it no longer reads: a node reader left with no fanReader stops
// too. A later subscription starts a new one.
func (s *streamBus) retireIfIdle(r *fanReader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.mu.Lock()
	idle := len(r.streams) == 0 && !r.retired && s.readers[r.group] == r
	if idle {
		r.retired = true
		delete(s.readers, r.group)
	}
	r.mu.Unlock()
	if idle {
		d := r.node.Load()
		delete(d.members, r)
		s.retireNodeLocked(d)
	}
}

// slotRead is one XREAD a node reader makes: for the fanReader r, over
// streams (XREAD's STREAMS arguments, from fanReader.args).
type slotRead struct {
	r       *fanReader
	streams []string
}

// loop is the node reader's goroutine; it returns when the bus closes or
// the node reader is retired.
func (d *nodeReader) loop() {
	defer d.bl.reset()
	ctx := d.s.ctx
	bo := newRetry()
	for ctx.Err() == nil {
		if d.promote.Swap(false) {
			d.promoteSlots()
		}
		if d.cluster != nil && !d.bl.connected() {
			// Dialling anew (the start, after an error or idling): first
			// hand the slots that another master serves now to its node
			// reader.
			d.rehome(ctx)
		}
		d.bl.arm()
		var reads []slotRead
		var retry time.Time // the earliest retryAt of a slot left out
		now := time.Now()
		for _, r := range d.membersNow() {
			if r.retryAt.After(now) {
				if retry.IsZero() || r.retryAt.Before(retry) {
					retry = r.retryAt
				}
				continue
			}
			if streams := r.args(); len(streams) > 0 {
				reads = append(reads, slotRead{r, streams})
			}
		}
		if len(reads) == 0 {
			d.bl.disarm()
			var due <-chan time.Time
			var t *time.Timer
			if retry.IsZero() {
				d.bl.reset() // hold no connection while idle
			} else {
				// Only slots waiting for their retry: wait for the first.
				t = time.NewTimer(time.Until(retry))
				due = t.C
			}
			select {
			case <-ctx.Done():
			case <-d.quit:
				if t != nil {
					t.Stop()
				}
				return
			case <-d.idle:
			case <-due:
			}
			if t != nil {
				t.Stop()
			}
			continue
		}
		d.dialKey = reads[0].r.key
		cmd, block, err := d.bl.cmd(ctx)
		if err != nil {
			d.bl.disarm()
			d.fail(ctx, err, &bo)
			continue
		}
		if !d.bl.fresh() {
			// A subscription came or went while the connection was being
			// set up: read the stream list again.
			d.bl.disarm()
			continue
		}
		if len(reads) == 1 && retry.IsZero() {
			err = d.read(ctx, cmd, reads[0], block)
		} else {
			// Several slots, or one while another waits for its retry:
			// poll, so that the waiting one is read again in time.
			if !retry.IsZero() {
				block = max(min(block, time.Until(retry)), time.Millisecond)
			}
			err = d.poll(ctx, cmd, reads, block)
		}
		if err != nil {
			d.fail(ctx, err, &bo)
			continue
		}
		bo.Reset()
		d.checkStreams(ctx, cmd)
	}
}

// membersNow returns the fanReaders d reads for.
func (d *nodeReader) membersNow() []*fanReader {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	rs := make([]*fanReader, 0, len(d.members))
	for r := range d.members {
		rs = append(rs, r)
	}
	return rs
}

// read makes the blocking XREAD of one fanReader, for up to block, and
// disarms the blocker as it returns. It returns the read's error, if any.
func (d *nodeReader) read(ctx context.Context, cmd redis.Cmdable, sr slotRead, block time.Duration) error {
	r := sr.r
	seq := r.startRead()
	res, err := cmd.XRead(ctx, &redis.XReadArgs{
		Streams: sr.streams,
		Count:   int64(d.s.b.opts.BatchSize),
		Block:   block,
	}).Result()
	d.bl.disarm()
	switch {
	case err == redis.Nil:
		r.retry.Reset()
		r.retryAt = time.Time{}
	case slotError(err):
		r.readDone(seq)
		d.slotFailed(ctx, r, err)
		return nil
	case err != nil:
		r.readDone(seq)
		return err
	default:
		r.retry.Reset()
		r.retryAt = time.Time{}
		r.dispatch(res)
		d.gotData(r, time.Now())
		r.readDone(seq)
		return nil
	}
	r.hot, r.dueAt = false, time.Now().Add(d.pollWait)
	r.readDone(seq)
	return nil
}

// poll reads for several fanReaders (Cluster hash slots of one node): one
// pipeline of non-blocking XREADs, one per slot that is due: it returned
// entries at its last read (more may have come), was woken
// (fanReader.wake: a subscription came, drained its channel...), or its
// dueAt, pollWait (as it was then) after its last read that found
// nothing, is less than clusterPollMin away; when none of them returned an entry and nothing changed
// meanwhile, a blocking read of the slot that last had entries (or else
// reads the most streams) until the next slot is due (pollWait at most,
// clusterPoll at most), so that the other slots are looked at again
// soon. An entry added to a slot after its XREAD waits for its next read,
// pollWait after it (plus a round trip); one added to the slot blocked on
// ends the wait at once. So a busy slot is read again at once while the
// quiet ones keep their cadence, not once per entry of the busy one. It
// disarms the blocker before it returns, and returns the first error of
// the connection or the node (a redirection first), after handing over
// what the other reads brought; an error of a slot's own goes to
// slotFailed.
func (d *nodeReader) poll(ctx context.Context, cmd redis.Cmdable, reads []slotRead, block time.Duration) error {
	now := time.Now()
	due := make([]slotRead, 0, len(reads))
	isDue := make([]bool, len(reads))
	early := false
	for i, sr := range reads {
		woken := sr.r.woken.Swap(false)
		switch {
		case sr.r.hot || woken:
		case !now.Before(sr.r.dueAt.Add(-clusterPollMin)):
			early = true
		default:
			continue
		}
		isDue[i] = true
	}
	for i, sr := range reads {
		// When quiet slots come due, the ones due within half a pollWait
		// are read with them, so that slots read apart (after traffic,
		// with other pollWaits) fall in step again: one pipeline per
		// pollWait on an idle node, not one per slot.
		if isDue[i] || early && !now.Before(sr.r.dueAt.Add(-d.pollWait/2)) {
			due = append(due, sr)
		}
	}
	var failed error
	var slotFails []int
	got := false
	if len(due) > 0 {
		pipe := cmd.Pipeline()
		seqs := make([]uint64, len(due))
		cmds := make([]*redis.XStreamSliceCmd, len(due))
		for i, sr := range due {
			seqs[i] = sr.r.startRead()
			cmds[i] = pipe.XRead(ctx, &redis.XReadArgs{
				Streams: sr.streams,
				Count:   int64(d.s.b.opts.BatchSize),
				Block:   -1, // no BLOCK
			})
		}
		_, _ = pipe.Exec(ctx)
		now = time.Now()
		for i, sr := range due {
			r := sr.r
			res, err := cmds[i].Result()
			switch {
			case err == redis.Nil:
				r.retry.Reset()
				r.retryAt = time.Time{}
				r.hot, r.dueAt = false, now.Add(d.pollWait)
			case slotError(err):
				slotFails = append(slotFails, i)
			case err != nil:
				if failed == nil || isMoved(err) && !isMoved(failed) {
					failed = err
				}
			default:
				r.retry.Reset()
				r.retryAt = time.Time{}
				r.dispatch(res)
				d.gotData(r, now)
				got = true
			}
			r.readDone(seqs[i])
		}
		if failed != nil {
			// The connection (or the node) failed: every read did.
			d.bl.disarm()
			return failed
		}
		for _, i := range slotFails {
			// A slot's own error: that slot waits for its retry, the
			// others are read on as usual.
			d.slotFailed(ctx, due[i].r, cmds[i].Err())
		}
	}
	if got || !d.bl.fresh() {
		// Read again at once: more may have come, or the inputs changed
		// (a wake after fresh is an unblock the block below gets).
		d.bl.disarm()
		return nil
	}
	var next slotRead
	for _, sr := range reads {
		// The node first: once another node reader reads sr.r, its
		// retryAt is that reader's to write.
		if sr.r.node.Load() != d || !sr.r.retryAt.IsZero() && sr.r.retryAt.After(now) {
			continue // handed to another node reader, or failed just now
		}
		if next.r == nil {
			next = sr
			continue
		}
		if sr.r.lastData.After(next.r.lastData) || sr.r.lastData.Equal(next.r.lastData) && len(sr.streams) > len(next.streams) {
			next = sr
		}
	}
	if next.r == nil {
		d.bl.disarm()
		return nil
	}
	// Block until the first of the other slots is due.
	wait := d.pollWait
	for _, sr := range reads {
		if sr.r != next.r && sr.r.node.Load() == d && !sr.r.retryAt.After(now) {
			wait = min(wait, sr.r.dueAt.Sub(now))
		}
	}
	wait = max(min(block, wait), time.Millisecond)
	d.pollWait = min(2*d.pollWait, clusterPoll)
	if !d.bl.canUnblock() {
		return d.read(ctx, cmd, next, wait)
	}
	// Redis ends a BLOCK only at a tick of its timer (every 100ms at the
	// default hz of 10: a BLOCK of 50ms lasts 90-100ms on an idle
	// server), so the read is ended after wait with CLIENT UNBLOCK (the
	// waker's); its BLOCK, longer, is a safety net.
	timer := time.AfterFunc(wait, d.bl.wake)
	defer timer.Stop()
	return d.read(ctx, cmd, next, min(block, 4*clusterPoll))
}

// gotData records that a read of r at now returned entries: r is read
// again at once (hot), and when the entries came to another slot than
// the last one that had some, the next polls are short again (pollWait
// back to clusterPollMin). Entries that keep coming to the one busy slot
// do not shorten them: the node reader blocks on that slot (poll), and
// the quiet slots keep the cadence they had. Loop only.
func (d *nodeReader) gotData(r *fanReader, now time.Time) {
	r.hot, r.lastData = true, now
	if d.lastHot != r {
		d.lastHot = r
		d.pollWait = clusterPollMin
	}
}

// rehome hands each of d's fanReaders whose hash slot another master
// serves now (after a failover or a slot migration, as the client's slot
// map says) to a node reader of that master (placeLocked). Only d's loop calls it, between
// its reads, so that no fanReader is ever read by two node readers at once.
func (d *nodeReader) rehome(ctx context.Context) {
	for _, r := range d.membersNow() {
		cli, err := d.cluster.MasterForKey(ctx, r.key)
		if err != nil {
			continue // where it is for now; tried again after the next error
		}
		if addr := cli.Options().Addr; addr != d.node {
			d.s.move(r, d, addr)
		}
	}
}

// slotError reports an error of one XREAD that concerns its hash slot, not
// the connection or the node: a reply of the server other than the ones
// that say the node cannot serve at all (READONLY: it is a replica now,
// LOADING, MASTERDOWN, CLUSTERDOWN, BUSY, NOAUTH). Such an error is
// handled for its slot alone (nodeReader.slotFailed); any other error
// fails the node reader's read as a whole (nodeReader.fail).
func slotError(err error) bool {
	var re redis.Error
	if err == nil || err == redis.Nil || !errors.As(err, &re) || isNetErr(err) {
		return false
	}
	for _, p := range []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "BUSY", "NOAUTH"} {
		if redis.HasErrorPrefix(err, p) {
			return false
		}
	}
	return true
}

// slotFailed handles an error of r's own hash slot (slotError), met by d's
// loop: after a redirection, r goes to the node reader of the master that
// serves its slot now when the client's slot map says so (as rehome);
// otherwise r is not read again before retryAt, its delay growing with
// each failure as fail's does (20ms doubling to 2s), while d goes on
// reading its other fanReaders without delay. d keeps its connection.
func (d *nodeReader) slotFailed(ctx context.Context, r *fanReader, err error) {
	if ctx.Err() != nil {
		return
	}
	r.hot = false
	d.s.b.opts.Logger.Warn("redisstreams: fan-out read of a hash slot failed; retrying it", "key", r.key, "err", err)
	if isMoved(err) {
		d.s.reloadCluster(ctx)
		if d.cluster != nil {
			if cli, e := d.cluster.MasterForKey(ctx, r.key); e == nil && cli.Options().Addr != d.node {
				r.retryAt = time.Time{}
				r.retry.Reset()
				d.s.move(r, d, cli.Options().Addr)
				return
			}
		}
	}
	r.retryAt = time.Now().Add(r.retry.Next())
}

// promoteSlots hands fanReaders of d, the shared node reader of a Cluster
// master, to the master's free lanes (a node reader of their own each,
// as placeLocked gives the first slots read on a master), the ones that
// last had entries first. Only d's loop calls it, between its reads (as
// rehome), after a lane of the master retired: so a master with at most
// clusterLanes-1 slots read has a node reader for each, blocking, however
// the slots came and went. d retires when it gave all its fanReaders away.
func (d *nodeReader) promoteSlots() {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || d.retired || d.cluster == nil || d.key != d.node {
		return
	}
	for lane := 1; lane < clusterLanes && len(d.members) > 0; lane++ {
		key := fmt.Sprintf("%s#%d", d.node, lane)
		if s.nodes[key] != nil {
			continue
		}
		var r *fanReader
		for m := range d.members {
			if r == nil || m.lastData.After(r.lastData) {
				r = m
			}
		}
		delete(d.members, r)
		n := s.nodeLocked(d.node, key)
		n.members[r] = struct{}{}
		r.node.Store(n)
		r.woken.Store(true)
		n.bl.wake()
	}
	s.retireNodeLocked(d)
}

// move hands the fanReader r from the node reader from to the one of the
// node key to, starting it when needed.
func (s *streamBus) move(r *fanReader, from *nodeReader, to string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := from.members[r]; !ok || s.stopping {
		return
	}
	delete(from.members, r)
	d := s.placeLocked(to)
	d.members[r] = struct{}{}
	r.node.Store(d)
	s.retireNodeLocked(from)
	r.woken.Store(true)
	d.bl.wake()
}

// clusterNode is the nodeFunc of a node reader on Cluster: the master of
// the current read's slot.
func (d *nodeReader) clusterNode(ctx context.Context) (*redis.Client, error) {
	return d.cluster.MasterForKey(ctx, d.dialKey)
}

// deletedUpTo records that DeleteTopic of this Backend deleted the stream
// key with last as its last entry id: for the key while it has local
// subscriptions (goneTo: subscriptions that join later, recreated groups),
// and for each fan-out subscription on it now (fanSub.gone); it wakes their
// readers, so that a read blocked since before the deletion returns and
// the ones that had not read everything need not wait for it. (goneTo is
// set before the subscriptions are looked at, and add looks at goneTo
// after it registered a subscription: every subscription gets the mark.)
func (s *streamBus) deletedUpTo(key, last string) {
	s.fmu.Lock()
	if s.subKeys[key] > 0 && (s.goneTo[key] == "" || compareStreamIDs(last, s.goneTo[key]) > 0) {
		s.goneTo[key] = last
	}
	s.delSeq++
	seq := s.delSeq
	if s.goneTo[key] != "" {
		s.goneSeq[key] = seq
	}
	s.fmu.Unlock()
	s.mu.Lock()
	var subs []*fanSub
	for sub := range s.subs {
		if f, ok := sub.(*fanSub); ok && f.key == key {
			subs = append(subs, f)
		}
	}
	s.mu.Unlock()
	woke := map[*fanReader]bool{}
	for _, f := range subs {
		f.markGone(last, seq)
		if !woke[f.r] {
			woke[f.r] = true
			f.r.wake()
		}
	}
}

// markGone records that the stream's entries up to last are gone (see
// gone), by the deletion counted seq (streamBus.delSeq): counted once the
// reads the reader started by now are over.
func (f *fanSub) markGone(last string, seq uint64) {
	f.r.mu.Lock()
	if f.gone == "" || compareStreamIDs(last, f.gone) > 0 {
		f.gone, f.goneAfter = last, f.r.readSeq
	}
	f.goneSeq = max(f.goneSeq, seq)
	switch {
	case f.deleted == "" || f.deletedEpoch < f.epoch:
		f.deleted, f.deletedEpoch = last, f.epoch
	case compareStreamIDs(last, f.deleted) > 0:
		f.deleted = last
	}
	f.r.mu.Unlock()
}

// wasDeleted reports whether a DeleteTopic of this Backend deleted the
// entry of m after it was read (see deleted).
func (f *fanSub) wasDeleted(m fanMsg) bool {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	if f.deleted == "" {
		return false
	}
	return m.epoch < f.deletedEpoch || (m.epoch == f.deletedEpoch && compareStreamIDs(m.id, f.deleted) <= 0)
}

// readDone records that the read numbered seq is over, its entries handed
// over (see fanSub.gone).
func (r *fanReader) readDone(seq uint64) {
	r.mu.Lock()
	r.doneSeq = seq
	r.mu.Unlock()
}

// startRead numbers a read of r as it starts (see fanSub.gone).
func (r *fanReader) startRead() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readSeq++
	return r.readSeq
}

func (d *nodeReader) fail(ctx context.Context, err error, bo *backoff.Backoff) {
	if ctx.Err() != nil {
		return
	}
	d.s.b.opts.Logger.Warn("redisstreams: fan-out read failed; retrying", "err", err)
	d.bl.reset() // the next read re-homes the slots first (Cluster)
	if isMoved(err) || staleMapErr(err) {
		// A transport error too: after a master died and the Cluster
		// promoted its replica, nothing answers MOVED, and a Backend
		// that only reads would read the dead node until go-redis
		// reloads the map on its own (60s; TestClusterMasterFailoverResumes).
		d.s.reloadCluster(ctx)
	}
	_ = backoff.Sleep(ctx, bo.Next())
}

// args returns the XREAD STREAMS arguments: each stream with a subscription
// that has room, from the smallest cursor among those.
func (r *fanReader) args() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.streams))
	ids := make([]string, 0, len(r.streams))
	for key, st := range r.streams {
		from := ""
		for _, sub := range st.subs {
			if sub.full.Load() {
				continue
			}
			if from == "" || compareStreamIDs(sub.cursor, from) < 0 {
				from = sub.cursor
			}
		}
		for _, g := range st.bells {
			if from == "" || compareStreamIDs(g.bellCursor, from) < 0 {
				from = g.bellCursor
			}
		}
		st.readFrom = from
		if from != "" {
			keys = append(keys, key)
			ids = append(ids, from)
		}
	}
	return append(keys, ids...)
}

// dispatch hands each entry to every subscription whose cursor is behind it
// and that has room, in stream order. Entries that do not decode are
// dead-lettered once by this reader.
func (r *fanReader) dispatch(res []redis.XStream) {
	type poison struct {
		topic, id string
		values    map[string]any
		err       error
	}
	var poisons []poison
	r.mu.Lock()
	for _, xs := range res {
		st := r.streams[xs.Stream]
		if st == nil {
			continue
		}
		if n := len(xs.Messages); n > 0 {
			// Ring the bells of the group subscriptions behind the newest
			// entry: they read the stream themselves (XREADGROUP). A full
			// batch may stop short of the stream's end (a fan-out
			// subscription catching up sets where the read starts), so
			// it rings every bell.
			newest := xs.Messages[n-1].ID
			full := n >= r.s.b.opts.BatchSize
			for _, g := range st.bells {
				if compareStreamIDs(newest, g.bellCursor) > 0 {
					g.bellCursor = newest
					g.ring()
				} else if full {
					g.ring()
				}
			}
		}
		// Which subscriptions take entries from this read is decided once,
		// here: a subscription full now, or whose channel fills during
		// the loop, takes none of the later entries even when its workers
		// drain the channel meanwhile (they clear full without r.mu), or
		// the entries skipped while it was full would be jumped over.
		var okBuf [8]bool
		ok := okBuf[:0]
		if len(st.subs) > len(okBuf) {
			ok = make([]bool, 0, len(st.subs))
		}
		for _, sub := range st.subs {
			// A subscription left out of this read (it was full, so its
			// cursor may be below the read's start) gets the entries
			// between its cursor and the read's start from its own cursor
			// next time.
			ok = append(ok, !sub.full.Load() && st.readFrom != "" && compareStreamIDs(sub.cursor, st.readFrom) >= 0)
		}
		for _, msg := range xs.Messages {
			var (
				ev      pubsub.Event
				decoded bool
				bad     bool
			)
			for i, sub := range st.subs {
				if !ok[i] || compareStreamIDs(msg.ID, sub.cursor) <= 0 {
					continue
				}
				if !decoded {
					var err error
					ev, err = decodeEvent(msg.Values)
					decoded = true
					if err != nil {
						bad = true
						poisons = append(poisons, poison{st.topic, msg.ID, msg.Values, err})
					}
				}
				if bad {
					sub.cursor = msg.ID
					continue
				}
				sub.full.Store(true)
				sub.busy.Add(1)
				select {
				case sub.ch <- fanMsg{id: msg.ID, ev: ev, epoch: sub.epoch}: // shared: handle copies it
					sub.full.Store(false)
					sub.cursor = msg.ID
				default: // stays full until its workers drain it
					sub.busy.Add(-1)
					ok[i] = false
					if hook := testChannelFull.Load(); hook != nil {
						(*hook)()
					}
				}
			}
		}
	}
	r.mu.Unlock()
	for _, p := range poisons {
		_ = r.s.deadLetterUndecodable(p.topic, p.id, p.values, p.err, nil)
	}
}

// checkStreams looks at the streams of the fanReaders of d that were not
// looked at for BlockTime (fanReader.checkStreams), in one pipeline.
func (d *nodeReader) checkStreams(ctx context.Context, cmd redis.Cmdable) {
	now := time.Now()
	var pipe redis.Pipeliner
	var applies []func()
	for _, r := range d.membersNow() {
		if now.Sub(r.lastCheck) < d.s.b.opts.BlockTime {
			continue
		}
		r.lastCheck = now
		if pipe == nil {
			pipe = cmd.Pipeline()
		}
		if apply := r.checkStreams(ctx, pipe); apply != nil {
			applies = append(applies, apply)
		}
	}
	if len(applies) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	for _, apply := range applies {
		apply()
	}
}

// checkStreams notices streams deleted (or recreated with lower ids) under
// the reader: XREAD on a missing key just blocks, and a recreated stream
// may restart below a cursor. The cursors of such streams go back to 0, so
// that everything in the stream when it reappears is delivered. It queues
// its XINFO STREAM commands on pipe and returns what to do once pipe ran
// (nil when it has nothing to look at).
func (r *fanReader) checkStreams(ctx context.Context, pipe redis.Pipeliner) (apply func()) {
	type snap struct {
		sub    *fanSub
		cursor string
	}
	type bellSnap struct {
		g      *groupSub
		cursor string
	}
	r.mu.Lock()
	snaps := make(map[string][]snap, len(r.streams))
	bells := make(map[string][]bellSnap)
	for key, st := range r.streams {
		for _, sub := range st.subs {
			if sub.cursor != "0-0" {
				snaps[key] = append(snaps[key], snap{sub, sub.cursor})
			}
		}
		for _, g := range st.bells {
			if g.bellCursor != "0-0" {
				bells[key] = append(bells[key], bellSnap{g, g.bellCursor})
			}
		}
	}
	r.mu.Unlock()
	if len(snaps) == 0 && len(bells) == 0 {
		return nil
	}
	type mark struct {
		last string
		n    uint64
	}
	marks := make(map[string]mark, len(snaps))
	infos := make(map[string]*redis.XInfoStreamCmd, len(snaps)+len(bells))
	for key := range snaps {
		// Before XINFO is sent: every write recorded by then ran before it.
		last, n := r.s.writeMark(key)
		marks[key] = mark{last, n}
		infos[key] = pipe.XInfoStream(ctx, key)
	}
	for key := range bells {
		if infos[key] == nil {
			infos[key] = pipe.XInfoStream(ctx, key)
		}
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for key, cmd := range infos {
			info, err := cmd.Result()
			last := ""
			switch {
			case err == nil:
				last = info.LastGeneratedID
			case isNoSuchKey(err):
				last = "0-0"
			default:
				continue // unknown: check again later
			}
			lowest := ""
			for _, sn := range snaps[key] {
				if sn.sub.cursor == sn.cursor && compareStreamIDs(last, sn.cursor) < 0 {
					sn.sub.cursor = "0-0"
					sn.sub.epoch++
					if sn.sub.floor == "" || compareStreamIDs(sn.cursor, sn.sub.floor) > 0 {
						sn.sub.floor = sn.cursor
					}
					if lowest == "" || compareStreamIDs(sn.cursor, lowest) < 0 {
						lowest = sn.cursor
					}
				}
			}
			if lowest != "" {
				// Deleted (DeleteTopic, StreamIdleTTL, a server that lost
				// it) or recreated lower: what this Backend wrote up to the
				// cursors was handed over or is gone, and is no Flush target
				// any more. A write above them may be in the stream as it is
				// now: Flush still waits for it.
				r.s.forgetWrites(key, lowest)
			}
			if m := marks[key]; m.last != "" && last == "0-0" && r.s.forgetWritesIfSame(key, m.last, m.n) {
				// The stream is gone, or was created again and never took
				// an entry (a group's MKSTREAM), and no write came since
				// the mark: every write of this Backend up to it was read
				// or is gone (a server that restarted without its data,
				// FLUSHALL, a deletion by another process), and a Flush
				// waiting for one is done, once the handlers finished
				// (this check runs between the reads of this reader: none
				// of its reads is in flight). A stream that took entries
				// since is left to the cursors: a later entry above the
				// write ends the wait, and after a failover to a server
				// whose clock lags, writes with lower ids may be in it.
				// TestReviewH75FlushAfterWipe.
				var subs []*fanSub
				if st := r.streams[key]; st != nil {
					subs = st.subs
				}
				for _, sub := range subs {
					if sub.floor == "" || compareStreamIDs(m.last, sub.floor) > 0 {
						sub.floor = m.last
					}
				}
			}
			for _, b := range bells[key] {
				// Deleted or recreated lower: the subscription reads again
				// (finding its group gone, it recreates it).
				if b.g.bellCursor == b.cursor && compareStreamIDs(last, b.cursor) < 0 {
					b.g.bellCursor = "0-0"
					b.g.ring()
				}
			}
		}
	}
}
