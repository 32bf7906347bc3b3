package redisstreams

import (
	"context"
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
// streamBus.readerGroup): one goroutine and one blocking connection issue
// XREAD over every stream its fan-out subscriptions read or a group
// subscription waits on, each from the smallest cursor among the fan-out
// subscriptions that have room and the group subscriptions' bells; it
// hands each entry to the fan-out subscriptions whose cursor is behind it
// and rings the bells behind the newest entry of each stream (the group
// subscription then reads with XREADGROUP itself).
type fanReader struct {
	s     *streamBus
	bl    *blocker
	group string        // its key in streamBus.readers (readerGroup)
	quit  chan struct{} // closed when it is retired
	done  chan struct{} // closed when its loop returned (never, for one made while closing)

	mu      sync.Mutex
	streams map[string]*fanStream
	// retired (guarded by mu) is set once the reader served no stream any
	// more and was taken out of streamBus.readers (retireIfIdle): nothing
	// may be added to it, and its goroutines end.
	retired bool
	idle    chan struct{} // kicks passed on by the waker
	// readSeq numbers the XREADs as they start; doneSeq is the last one
	// over, its entries handed over (guarded by mu).
	readSeq, doneSeq uint64

	lastCheck time.Time
}

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
	goneSeq   uint64       // the latest deletion (streamBus.delSeq) that set gone
	full      atomic.Bool  // ch was full: the reader skips it until drained
	busy      atomic.Int64 // entries handed over and not yet handled
	ch        chan fanMsg

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
}

// testChannelFull, when set by a test, runs in the reader after a
// subscription's channel was found full during a dispatch.
var testChannelFull atomic.Pointer[func()]

// testReaderFound, when set by a test, runs in Subscribe (fan-out) between
// finding the shared reader and attaching to it.
var testReaderFound atomic.Pointer[func()]

type fanMsg struct {
	id string
	ev pubsub.Event
}

// readerFor returns the running shared reader for the stream key, starting
// it when needed (once the bus is stopping, one that never runs).
func (s *streamBus) readerFor(key string) *fanReader {
	group, node := s.readerGroup(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.readers[group]; r != nil {
		return r
	}
	r := &fanReader{
		s:       s,
		bl:      newBlocker(s.b, node),
		group:   group,
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		streams: make(map[string]*fanStream),
		idle:    make(chan struct{}, 1),
	}
	if s.stopping {
		// Closing: a reader that never runs (its callers are stopping
		// too), not started, so close's wait for bg is not raced.
		return r
	}
	s.readers[group] = r
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		defer close(r.done)
		r.loop()
	}()
	go func() {
		defer s.bg.Done()
		r.bl.waker(r.idle, r.done)
	}()
	return r
}

func (s *streamBus) subscribeFanOut(ctx context.Context, p *pubsub.Policy, cfg pubsub.SubscribeConfig) (pubsub.Subscription, error) {
	topic := p.Topic()
	key := s.b.keys.Stream(topic)
	cursor := "0-0"
	if cfg.StartFrom == pubsub.Latest {
		id, err := s.lastStreamID(ctx, key)
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
	r.bl.wake()
	return sub, nil
}

// Topic returns the subscribed topic.
func (f *fanSub) Topic() string { return f.topic }

// Unsubscribe stops deliveries and waits for running handlers (or ctx).
func (f *fanSub) Unsubscribe(ctx context.Context) error { return f.shutdown(ctx) }

func (f *fanSub) shutdown(ctx context.Context) error {
	f.once.Do(func() {
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
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// work is one handler goroutine; it returns when the subscription stops.
func (f *fanSub) work() {
	defer f.wg.Done()
	for {
		var m fanMsg
		select {
		case <-f.ctx.Done():
			return
		case m = <-f.ch:
		}
		if f.full.Load() && len(f.ch) <= cap(f.ch)/2 && f.full.CompareAndSwap(true, false) {
			f.r.bl.wake()
		}
		f.handle(m)
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
		f.r.bl.wake()
	}
	reached := compareStreamIDs(cursor, id) >= 0 || (floor != "" && compareStreamIDs(floor, id) >= 0) || gone
	return reached && f.busy.Load() == 0, nil
}

// handle delivers one entry under the subscription's policy, redelivering
// it locally after each failed attempt (the policy dead-letters it after
// MaxDeliveries attempts). An unsubscribed subscription drops it.
//
// Each attempt gets its own copy of the event: m.ev is shared with the
// other fan-out subscriptions that got the entry from the same read, and a
// handler may change its event's Data and Metadata.
func (f *fanSub) handle(m fanMsg) {
	for attempt := 1; ; attempt++ {
		e := cloneEvent(m.ev)
		e.DeliveryAttempt = attempt
		if f.p.Handle(f.ctx, e) == nil || f.ctx.Err() != nil {
			return
		}
		if backoff.Sleep(f.ctx, f.p.RedeliveryDelay(attempt)) != nil {
			return
		}
	}
}

// retireIfIdle stops the reader r and forgets it when it serves no stream
// any more (its last subscription or bell left), so that a Backend keeps
// no reader, and no goroutine, for the hash slots (Cluster) or tags (other
// clients) it no longer reads. A later subscription starts a new one.
func (s *streamBus) retireIfIdle(r *fanReader) {
	s.mu.Lock()
	r.mu.Lock()
	idle := len(r.streams) == 0 && !r.retired && s.readers[r.group] == r
	if idle {
		r.retired = true
		delete(s.readers, r.group)
	}
	r.mu.Unlock()
	s.mu.Unlock()
	if idle {
		close(r.quit)
		r.bl.wake() // out of a read it may still be blocked in
	}
}

// loop is the reader goroutine; it returns when the bus closes or the
// reader is retired.
func (r *fanReader) loop() {
	defer r.bl.reset()
	ctx := r.s.ctx
	bo := newRetry()
	for ctx.Err() == nil {
		r.bl.arm()
		streams := r.args()
		if len(streams) == 0 {
			r.bl.disarm()
			r.bl.reset() // hold no connection while idle
			select {
			case <-ctx.Done():
			case <-r.quit:
				return
			case <-r.idle:
			}
			continue
		}
		cmd, block, err := r.bl.cmd(ctx)
		if err != nil {
			r.bl.disarm()
			r.fail(ctx, err, &bo)
			continue
		}
		if !r.bl.fresh() {
			// A subscription came or went while the connection was being
			// set up: read the stream list again.
			r.bl.disarm()
			continue
		}
		r.mu.Lock()
		r.readSeq++
		seq := r.readSeq
		r.mu.Unlock()
		res, err := cmd.XRead(ctx, &redis.XReadArgs{
			Streams: streams,
			Count:   int64(r.s.b.opts.BatchSize),
			Block:   block,
		}).Result()
		r.bl.disarm()
		switch {
		case err == redis.Nil:
			bo.Reset()
		case err != nil:
			r.readDone(seq)
			r.fail(ctx, err, &bo)
			continue
		default:
			bo.Reset()
			r.dispatch(res)
		}
		r.readDone(seq)
		if time.Since(r.lastCheck) >= r.s.b.opts.BlockTime {
			r.checkStreams(ctx, cmd)
		}
	}
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
			f.r.bl.wake()
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
	f.r.mu.Unlock()
}

// readDone records that the read numbered seq is over, its entries handed
// over (see fanSub.gone).
func (r *fanReader) readDone(seq uint64) {
	r.mu.Lock()
	r.doneSeq = seq
	r.mu.Unlock()
}

func (r *fanReader) fail(ctx context.Context, err error, bo *backoff.Backoff) {
	if ctx.Err() != nil {
		return
	}
	r.s.b.opts.Logger.Warn("redisstreams: fan-out read failed; retrying", "err", err)
	r.bl.reset()
	if isMoved(err) {
		r.s.reloadCluster(ctx)
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
				case sub.ch <- fanMsg{id: msg.ID, ev: ev}: // shared: handle copies it
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
		_ = r.s.deadLetterUndecodable(p.topic, p.id, p.values, p.err)
	}
}

// checkStreams notices streams deleted (or recreated with lower ids) under
// the reader: XREAD on a missing key just blocks, and a recreated stream
// may restart below a cursor. The cursors of such streams go back to 0, so
// that everything in the stream when it reappears is delivered.
func (r *fanReader) checkStreams(ctx context.Context, cmd redis.Cmdable) {
	r.lastCheck = time.Now()
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
		return
	}
	pipe := cmd.Pipeline()
	infos := make(map[string]*redis.XInfoStreamCmd, len(snaps)+len(bells))
	for key := range snaps {
		infos[key] = pipe.XInfoStream(ctx, key)
	}
	for key := range bells {
		if infos[key] == nil {
			infos[key] = pipe.XInfoStream(ctx, key)
		}
	}
	_, _ = pipe.Exec(ctx)
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
