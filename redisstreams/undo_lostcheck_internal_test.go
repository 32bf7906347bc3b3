package redisstreams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestUndoneClaimNotRecoveredAsLostRead forces, step by step, the race
// behind the CI failure of TestReviewHandBackUnsyncedRunsTwice ("e1 ran
// twice: B (attempt 2) … then C (attempt 2)"), which that test only met
// by chance, and which recoverLost's check of g.undos fixes.
//
// Member B (PublishSyncReplicas 1, its one replica paused) is suspect of
// a lost read: it read e2 during the stall, and that read's WAIT fell
// short, so each of its reads carries a lost-read check (XPENDING of what
// is pending on B). B's stale pass claims e1 from consumer "dead"; the
// claim's WAIT falls short (ErrNotReplicated), and claimQueue undoes the
// claim (undoClaim). A go-redis hook on B's client then sets the order:
//
//  1. it holds the undo (undo_claim.lua) before it is sent: e1 is claimed
//     on B on the master, and B's claim reserves it;
//  2. it holds B's next read pipeline with a check until the replica is
//     resumed (so that this read's own WAIT succeeds and its result is
//     processed, as after the stall in CI), then sends it: its XPENDING
//     runs after the XCLAIM and before the undo, and lists e1 on B;
//  3. before handing that pipeline's replies back to the read loop, it
//     lets the undo run (e1 back on "dead") and waits until claimQueue
//     released its reservation of e1; meanwhile any further single
//     XPENDING (the first step of a stale pass, and of refreshLost)
//     waits, so that no new claim reserves e1 again before recoverLost
//     looks at the check.
//
// The property: an entry pending on another consumer is never handed to
// B's handler by a lost-read check (recoverLost) that listed it on B
// before a claim of B's was undone. Had it been, e1 would run on B while
// it is pending on "dead", and any member's stale pass (C's in CI) takes
// it from "dead" and runs it again. So the test fails when, once B's read
// loop is past that check's result (it sent its next read), e1 is queued
// for B's handler or was run by it; and, once passes may claim again, when
// a run of e1 finds it pending anywhere but on B, or when e1 does not run
// (once B's stale pass claims it for good, with the replica back).
//
// With recoverLost's `g.undos.Load() != undos` branch disabled it failed
// 10 runs of 10 (5 with -race): e1 queued for B's handler and run by it
// as attempt 2 (the count the check saw, raised by the claim) while it
// was pending on "dead"; with the branch, 10 of 10 with -race pass. No
// hook in the library is needed: the order is set on the client.
func TestUndoneClaimNotRecoveredAsLostRead(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, redistest.Options{})
	_, port, err := net.SplitHostPort(master.Addr())
	if err != nil {
		t.Fatal(err)
	}
	replica := redistest.Start(t, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", port}})
	h := newUndoRaceHook()
	var (
		owner   func() string // e1's consumer (or why none), from the test's own client
		putBack string        // owner() as the held check's replies went back
	)
	h.onChecked = func() { putBack = owner() }
	c := master.Client(t)
	c.AddHook(h) // before the Backend sends anything through c
	b := psBackend(t, c, Options{PublishSyncReplicas: 1, PublishSyncTimeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(h.letGo)     // (also when the test fails early: before b closes)
	mc := master.Client(t) // the test's own looks, not hooked
	ctx := t.Context()
	const topic = "undo-lostcheck"
	key := b.keys.Stream(topic)
	awaitSynced(t, b, topic) // the replica is attached
	if err := mc.XGroupCreate(ctx, key, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	// (A WAIT of 200ms may fall short on a busy machine: the event is on
	// the master all the same, and its replication is not what this test
	// is about.)
	if err := b.Publish(ctx, topic, pubsub.Event{ID: "e1", Type: "t"}); err != nil && !errors.Is(err, ErrNotReplicated) {
		t.Fatal(err)
	}
	id := deadRead(t, mc, key)
	h.id.Store(&id)
	owner = func() string {
		pend, err := mc.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: key, Group: "g", Start: id, End: id, Count: 1}).Result()
		switch {
		case err != nil:
			return "(XPENDING: " + err.Error() + ")"
		case len(pend) == 0:
			return "(none: acked)"
		}
		return pend[0].Consumer
	}

	replica.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume(t)
		}
	}()

	type run struct{ attempt int }
	var (
		mu    sync.Mutex
		runs  []run
		where []string // e1's consumer as each run began
	)
	ran := make(chan struct{}, 8)
	handler := func(_ context.Context, ev pubsub.Event) error {
		if ev.ID != "e1" {
			return nil
		}
		mu.Lock()
		runs = append(runs, run{attempt: ev.DeliveryAttempt}) // before the ack can forget it
		mu.Unlock()
		o := owner()
		mu.Lock()
		where = append(where, o)
		mu.Unlock()
		ran <- struct{}{}
		return nil
	}
	sub, err := b.Subscribe(ctx, topic, handler, pubsub.Group("g"), pubsub.AckDeadline(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	defer h.letGo() // before the Unsubscribe: nothing stays held
	g := sub.(*groupSub)
	h.g.Store(g)

	// B reads e2 during the stall: the read's WAIT falls short, so B is
	// suspect (lostFrom "": e1, once claimed on B, is above it).
	_ = b.Publish(ctx, topic, pubsub.Event{ID: "e2", Type: "t"}) // ErrNotReplicated: on the master
	waitUntil := func(what string, d time.Duration, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(d):
			t.Fatalf("%s: not within %v (e1 pending on %s; hook: %v)", what, d, owner(), h.problemList())
		}
	}
	suspect := make(chan struct{})
	go func() {
		defer close(suspect)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			g.mu.Lock()
			s := g.suspect
			g.mu.Unlock()
			if s {
				return
			}
		}
	}()
	<-suspect
	g.mu.Lock()
	s := g.suspect
	g.mu.Unlock()
	if !s {
		t.Fatal("B did not become suspect of a lost read within 10s of reading e2 during the stall")
	}

	// B's stale pass claims e1 (its WAIT falls short) and its undo is held
	// (1); then B's next read with a check is held (2).
	waitUntil("B's stale pass claiming e1 from \"dead\" and undoing the claim", 20*time.Second, h.undoHeld)
	if o := owner(); o != g.consumer {
		t.Fatalf("with the undo held, e1 is pending on %q, want on B (%q)", o, g.consumer)
	}
	waitUntil("B's next read with a lost-read check", 20*time.Second, h.readHeld)
	replica.Resume(t)
	resumed = true
	awaitReplicaAck(t, mc)
	close(h.readGo)
	// (3): the check ran between the claim and the undo, the undo ran, the
	// claim's reservation ended, and the read loop got the replies.
	waitUntil("the held read's check handed back after the undo", 20*time.Second, h.checked)
	waitUntil("B's next read after the held one", 20*time.Second, h.after)
	for _, p := range h.problemList() {
		t.Error(p)
	}
	g.mu.Lock()
	_, queued := g.inflight[id]
	g.mu.Unlock()
	mu.Lock()
	early := len(runs)
	mu.Unlock()
	if putBack != "dead" {
		t.Errorf("setup: as the held check's replies went back, e1 was pending on %q, want on \"dead\" (the undo ran)", putBack)
	}
	if queued || early > 0 {
		t.Errorf("e1 handed to B's handler (queued %v, runs so far %d) by a lost-read check that listed it on B between B's claim and its undo, which put it back on %q: any member's stale pass takes it from there and runs it again",
			queued, early, putBack)
	}

	// Passes may claim again: B's stale pass takes e1 from "dead" (the
	// replica is back, so the claim stands) and runs it, once, held by B.
	close(h.gate)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Errorf("e1 did not run within 10s of the replica's return (pending on %s)", owner())
	}
	time.Sleep(200 * time.Millisecond) // a second run, if any, shows
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 1 {
		t.Errorf("e1 ran %d times, want 1: attempts %v, pending on %v as each run began", len(runs), runs, where)
	}
	for i, o := range where {
		if o != g.consumer {
			t.Errorf("run %d of e1 (attempt %d) began with e1 pending on %q, not on B (%q)", i+1, runs[i].attempt, o, g.consumer)
		}
	}
}

// awaitReplicaAck waits until the replica acknowledged a write made on c
// after it was resumed (WAIT), at most redistest.ReadyTimeout.
func awaitReplicaAck(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := t.Context()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if err := c.Set(ctx, "undo-lostcheck-probe", start.UnixNano(), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Do(ctx, "WAIT", 1, 200).Int(); err == nil && n >= 1 {
			return
		}
		if time.Since(start) > redistest.ReadyTimeout {
			t.Fatal("the resumed replica did not acknowledge a write")
		}
	}
}

// undoRaceHook orders the commands of one group subscription (g) on its
// Backend's client for TestUndoneClaimNotRecoveredAsLostRead. Every hold
// lets go when the command's context ends or at letGo.
type undoRaceHook struct {
	g  atomic.Pointer[groupSub]
	id atomic.Pointer[string] // e1's id

	abort     chan struct{}
	abortOnce sync.Once

	undoTaken atomic.Bool
	undosAt   atomic.Uint64 // g.undos as the undo was held
	undoHeld  chan struct{} // the undo of g's claim of e1 is held
	undoGo    chan struct{} // the undo may run

	readTaken atomic.Bool
	readOnce  sync.Once
	readHeld  chan struct{} // a read with a lost-read check, sent after undoHeld, is held
	readGo    chan struct{} // it may be sent
	checked   chan struct{} // its replies go back to the read loop, after the undo and the release
	afterOnce sync.Once
	after     chan struct{} // g sent another read after that one
	gate      chan struct{} // closed: single XPENDINGs run again
	// onChecked, when set (before the Backend sends anything), runs as the
	// held read's replies are about to go back to the read loop.
	onChecked func()

	mu       sync.Mutex
	problems []string
}

func newUndoRaceHook() *undoRaceHook {
	return &undoRaceHook{
		abort:    make(chan struct{}),
		undoHeld: make(chan struct{}),
		undoGo:   make(chan struct{}),
		readHeld: make(chan struct{}),
		readGo:   make(chan struct{}),
		checked:  make(chan struct{}),
		after:    make(chan struct{}),
		gate:     make(chan struct{}),
	}
}

func (h *undoRaceHook) letGo() { h.abortOnce.Do(func() { close(h.abort) }) }

func (h *undoRaceHook) problem(format string, args ...any) {
	h.mu.Lock()
	h.problems = append(h.problems, fmt.Sprintf(format, args...))
	h.mu.Unlock()
}

func (h *undoRaceHook) problemList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.problems)
}

// hold waits for ch; false when the hold ended otherwise (ctx, letGo).
func (h *undoRaceHook) hold(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-h.abort:
	case <-ctx.Done():
	}
	return false
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// isUndo reports whether cmd is g's undo_claim.lua putting back e1.
func (h *undoRaceHook) isUndo(cmd redis.Cmder) bool {
	g, id := h.g.Load(), h.id.Load()
	if g == nil || id == nil {
		return false
	}
	a := cmd.Args()
	switch {
	case len(a) < 7:
		return false
	case cmd.Name() == "evalsha" && a[1] == undoClaimScript.Hash():
	case cmd.Name() == "eval" && a[1] == undoClaimLua:
	default:
		return false
	}
	return a[5] == g.consumer && slices.Contains(a[6:], any(*id))
}

// lostCheck returns the lost-read check of g's read pipeline cmds, and
// whether cmds are a read of g at all.
func (h *undoRaceHook) lostCheck(cmds []redis.Cmder) (chk *redis.XPendingExtCmd, read bool) {
	g := h.g.Load()
	if g == nil {
		return nil, false
	}
	for _, c := range cmds {
		a := c.Args()
		switch c := c.(type) {
		case *redis.Cmd:
			if c.Name() == "evalsha" && len(a) > 3 && a[1] == readScript.Hash() && a[3] == g.key {
				read = true
			}
		case *redis.XPendingExtCmd:
			if a[len(a)-1] == g.consumer {
				chk = c
			}
		}
	}
	if !read {
		return nil, false
	}
	return chk, true
}

func (h *undoRaceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *undoRaceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch {
		case h.isUndo(cmd) && h.undoTaken.CompareAndSwap(false, true):
			h.undosAt.Store(h.g.Load().undos.Load())
			close(h.undoHeld)
			h.hold(ctx, h.undoGo)
		case cmd.Name() == "xpending" && isClosed(h.undoHeld):
			// A stale pass (or refreshLost) would reserve e1 again:
			// not before the test has looked.
			h.hold(ctx, h.gate)
		}
		return next(ctx, cmd)
	}
}

func (h *undoRaceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		chk, read := h.lostCheck(cmds)
		if read && isClosed(h.checked) {
			h.afterOnce.Do(func() { close(h.after) })
		}
		if chk == nil || !isClosed(h.undoHeld) || isClosed(h.checked) || !h.readTaken.CompareAndSwap(false, true) {
			return next(ctx, cmds)
		}
		// A check sent after the XCLAIM ran, before the undo.
		h.readOnce.Do(func() { close(h.readHeld) })
		if !h.hold(ctx, h.readGo) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds)
		if w, ok := cmds[len(cmds)-1].(*redis.IntCmd); !ok || w.Val() < 1 {
			// This read's WAIT fell short (the replica not caught up
			// yet): the read loop drops it; take the next one.
			h.readTaken.Store(false)
			return err
		}
		g, id := h.g.Load(), *h.id.Load()
		if pend, perr := chk.Result(); perr != nil || !slices.ContainsFunc(pend, func(p redis.XPendingExt) bool { return p.ID == id }) {
			h.problem("setup: the held check did not list e1 (%s) on B: %+v, %v", id, pend, perr)
		}
		close(h.undoGo)
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.mu.Lock()
			released := !g.claiming[id]
			g.mu.Unlock()
			if released && g.undos.Load() != h.undosAt.Load() {
				break
			}
			if time.Now().After(deadline) || isClosed(h.abort) {
				h.problem("setup: the undone claim of e1 did not end its reservation within 10s")
				break
			}
			time.Sleep(time.Millisecond)
		}
		if h.onChecked != nil {
			h.onChecked()
		}
		close(h.checked)
		return err
	}
}
