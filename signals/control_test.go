package signals_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/signals"
)

// blocker is an agent whose signals named "block*" wait for their run's ctx
// to end; it records every signal it starts, and the cause of each ctx that
// ended.
type blocker struct {
	mu      sync.Mutex
	started []string
	causes  map[string]error
	runs    map[string]string // signal → run ID
	got     chan string
}

func newBlocker() *blocker {
	return &blocker{causes: map[string]error{}, runs: map[string]string{}, got: make(chan string, 100)}
}

func (b *blocker) agent(ctx context.Context, run *signals.Run) error {
	for _, s := range run.Signals {
		b.mu.Lock()
		b.started = append(b.started, s.ID)
		b.runs[s.ID] = run.ID
		b.mu.Unlock()
		b.got <- s.ID
		if strings.HasPrefix(s.ID, "block") {
			<-ctx.Done()
			b.mu.Lock()
			b.causes[s.ID] = context.Cause(ctx)
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	return nil
}

func (b *blocker) expect(t *testing.T, id string) {
	t.Helper()
	select {
	case got := <-b.got:
		if got != id {
			t.Fatalf("agent started %q, want %q (started so far %v)", got, id, b.startedIDs())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("agent did not start %q within 10s (started so far %v)", id, b.startedIDs())
	}
}

func (b *blocker) startedIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.started...)
}

func (b *blocker) cause(id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.causes[id]
}

// queued waits until thread has n signals queued (not taken by a run).
func queued(t *testing.T, rt *signals.Runtime, thread string, n int64) signals.ThreadStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := rt.Status(context.Background(), thread)
		if err != nil {
			t.Fatal(err)
		}
		if st.Queued == n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %+v, want %d queued", st, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCancelFromAnotherRuntime cancels the running run of a thread owned by
// one runtime from another one on the same backend: the agent sees the
// reason as the cause, the queued signals then run in order, and the
// cancelled signal is not run again.
func TestCancelFromAnotherRuntime(t *testing.T) {
	b := newBackend(t)
	ag := newBlocker()
	owner := newRuntime(t, b, ag.agent, signals.WithProcessID("owner"))
	other := newRuntime(t, b, func(context.Context, *signals.Run) error { return nil }, signals.WithProcessID("other"))
	ctx := context.Background()
	for _, id := range []string{"block-1", "s2", "s3"} {
		if _, err := owner.Send(ctx, "t", sig(id)); err != nil {
			t.Fatal(err)
		}
	}
	ag.expect(t, "block-1")
	st := queued(t, other, "t", 2)
	if st.Process != "owner" || st.RunID == "" || st.Token == 0 || st.TTL <= 0 || st.InFlight != 1 || st.LastSignal.IsZero() {
		t.Fatalf("Status = %+v, want owner's run, a token, time left, 1 in flight, a last signal time", st)
	}

	res, err := other.Cancel(ctx, "t", "user pressed stop")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cancelled || res.Process != "owner" || res.RunID != st.RunID || res.Token != st.Token {
		t.Fatalf("Cancel = %+v, want the cancel of run %s (token %d) of owner", res, st.RunID, st.Token)
	}
	ag.expect(t, "s2")
	ag.expect(t, "s3")
	var ce *signals.CancelError
	if cause := ag.cause("block-1"); !errors.Is(cause, signals.ErrCancelled) || !errors.As(cause, &ce) || ce.Reason != "user pressed stop" || ce.Thread != "t" {
		t.Fatalf("cause of the cancelled run = %v, want a *CancelError with the reason", cause)
	}
	// Nothing more runs: the cancelled signal counts as done.
	select {
	case id := <-ag.got:
		t.Fatalf("agent started %q after the queue drained; started %v", id, ag.startedIDs())
	case <-time.After(300 * time.Millisecond):
	}

	// Idle thread (the tenure ended, or lingers between runs): a no-op.
	res, err = other.Cancel(ctx, "t", "again")
	if err != nil || res.Cancelled {
		t.Fatalf("Cancel of an idle thread = %+v, %v; want not cancelled, nil", res, err)
	}
	res, err = other.Cancel(ctx, "never-used", "why")
	if err != nil || res.Cancelled || res.Owner != "" {
		t.Fatalf("Cancel of an unknown thread = %+v, %v; want a no-op", res, err)
	}
}

// TestCancelLocalAndDropQueued cancels a run of this very runtime with
// DropQueued: the queued signals are dropped, later ones run.
func TestCancelLocalAndDropQueued(t *testing.T) {
	b := newBackend(t)
	ag := newBlocker()
	rt := newRuntime(t, b, ag.agent)
	ctx := context.Background()
	for _, id := range []string{"block-1", "s2", "s3"} {
		if _, err := rt.Send(ctx, "t", sig(id)); err != nil {
			t.Fatal(err)
		}
	}
	ag.expect(t, "block-1")
	res, err := rt.Cancel(ctx, "t", "drop all", signals.DropQueued())
	if err != nil || !res.Cancelled {
		t.Fatalf("Cancel = %+v, %v; want cancelled", res, err)
	}
	if _, err := rt.Send(ctx, "t", sig("s4")); err != nil {
		t.Fatal(err)
	}
	ag.expect(t, "s4")
	if got := ag.startedIDs(); strings.Join(got, ",") != "block-1,s4" {
		t.Fatalf("started %v, want block-1 then s4 (s2, s3 dropped)", got)
	}
	// A duplicate Send of a dropped signal is not run either.
	if _, err := rt.Send(ctx, "t", sig("s2")); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Send(ctx, "t", sig("s5")); err != nil {
		t.Fatal(err)
	}
	ag.expect(t, "s5")
}

// TestCancelDuringHandOff sends a Cancel while the owner hands the thread
// from a finished run to the next: it cancels the run being started.
func TestCancelDuringHandOff(t *testing.T) {
	b := newBackend(t)
	ag := newBlocker()
	atHandOff, release := make(chan string, 10), make(chan struct{})
	owner := newRuntime(t, b, ag.agent, signals.WithProcessID("owner"), signals.WithHooks(signals.Hooks{
		BeforeHandOff: func(string) { atHandOff <- "x"; <-release },
	}))
	other := newRuntime(t, b, func(context.Context, *signals.Run) error { return nil }, signals.WithProcessID("other"))
	ctx := context.Background()
	// s1 runs and ends; block-2 queued behind it is handed off.
	for _, id := range []string{"s1", "block-2"} {
		if _, err := owner.Send(ctx, "t", sig(id)); err != nil {
			t.Fatal(err)
		}
	}
	ag.expect(t, "s1")
	<-atHandOff
	type result struct {
		res signals.CancelResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := other.Cancel(ctx, "t", "stop during hand-off")
		done <- result{res, err}
	}()
	// The cancel cannot complete before the next run exists.
	select {
	case r := <-done:
		t.Fatalf("Cancel returned %+v, %v during the hand-off, before the next run started", r.res, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	r := <-done
	if r.err != nil || !r.res.Cancelled {
		t.Fatalf("Cancel during hand-off = %+v, %v; want cancelled", r.res, r.err)
	}
	ag.expect(t, "block-2")
	ag.mu.Lock()
	runID := ag.runs["block-2"]
	ag.mu.Unlock()
	if r.res.RunID != runID {
		t.Fatalf("Cancel reports run %s, want the run that took the thread, %s", r.res.RunID, runID)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ag.cause("block-2") == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c := ag.cause("block-2"); !errors.Is(c, signals.ErrCancelled) {
		t.Fatalf("cause of the run after the hand-off = %v, want the cancel", c)
	}
}

// TestCancelUnreachableOwner fails closed when the thread's lease names a
// process that does not answer.
func TestCancelUnreachableOwner(t *testing.T) {
	b := newBackend(t)
	rt := newRuntime(t, b, func(context.Context, *signals.Run) error { return nil })
	if _, err := b.AcquireLease(context.Background(), signals.LeaseKey("t"), "ghost/run-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := rt.Cancel(ctx, "t", "stop")
	if !errors.Is(err, signals.ErrUnreachable) || res.Cancelled {
		t.Fatalf("Cancel with a dead owner = %+v, %v; want an error wrapping ErrUnreachable", res, err)
	}
	if !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("error %q does not name the owner", err)
	}
	st, err := rt.Status(context.Background(), "t")
	if err != nil || st.Process != "ghost" || st.RunID != "run-1" || st.Queued != 0 {
		t.Fatalf("Status = %+v, %v; want process ghost, run run-1, nothing queued", st, err)
	}
}

// TestCancelOnStalledServer: Cancel whose lease read gets no answer (the
// server is SIGSTOPped: a black hole) fails with an error wrapping
// ErrUnreachable, as one whose owner does not answer does (review 21 found
// it was a bare i/o timeout).
func TestCancelOnStalledServer(t *testing.T) {
	srv, _ := startRedis(t)
	release := make(chan struct{})
	rt, _ := urlRuntime(t, srv.URL(), "", "A", func(ctx context.Context, _ *signals.Run) error {
		select {
		case <-ctx.Done():
		case <-release:
		}
		return nil
	}, nil)
	t.Cleanup(func() { close(release) }) // before the runtime's Close
	if _, err := rt.Send(context.Background(), "t", sig("s1")); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := rt.Cancel(ctx, "t", "stop")
	if !errors.Is(err, signals.ErrUnreachable) || res.Cancelled {
		t.Fatalf("Cancel on a stalled server = %+v, %v; want an error wrapping ErrUnreachable", res, err)
	}
	srv.Resume(t)
}

func TestCancelInvalidAndClosed(t *testing.T) {
	b := newBackend(t)
	rt, err := signals.New(b, func(context.Context, *signals.Run) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name, field string
		err         error
	}{
		{"empty thread", "thread", func() error { _, err := rt.Cancel(ctx, "", "why"); return err }()},
		{"empty reason", "reason", func() error { _, err := rt.Cancel(ctx, "t", ""); return err }()},
		{"nil option", "option", func() error { _, err := rt.Cancel(ctx, "t", "why", nil); return err }()},
		{"status empty thread", "thread", func() error { _, err := rt.Status(ctx, ""); return err }()},
	} {
		if !errors.Is(tc.err, signals.ErrInvalid) || !strings.Contains(tc.err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalid naming %s", tc.name, tc.err, tc.field)
		}
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Cancel(ctx, "t", "why"); !errors.Is(err, signals.ErrClosed) {
		t.Errorf("Cancel after Close = %v, want ErrClosed", err)
	}
	if _, err := rt.Status(ctx, "t"); !errors.Is(err, signals.ErrClosed) {
		t.Errorf("Status after Close = %v, want ErrClosed", err)
	}
}

// TestControllerListAndInternalKeys lists threads with a standalone
// Controller and checks that done records are internal keys.
func TestControllerListAndInternalKeys(t *testing.T) {
	b := newBackend(t)
	ag := newBlocker()
	rt := newRuntime(t, b, ag.agent, signals.WithProcessID("p1"))
	ctx := context.Background()
	for _, th := range []string{"b", "a"} {
		if _, err := rt.Send(ctx, th, sig("block-"+th)); err != nil {
			t.Fatal(err)
		}
		<-ag.got
	}
	c, err := signals.NewController(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Thread != "a" || list[1].Thread != "b" || list[0].Process != "p1" {
		t.Fatalf("List = %+v, want threads a and b owned by p1", list)
	}
	for _, th := range []string{"a", "b"} {
		if res, err := c.Cancel(ctx, th, "done looking"); err != nil || !res.Cancelled {
			t.Fatalf("Controller.Cancel(%s) = %+v, %v", th, res, err)
		}
	}
	infos, err := b.ListLeases(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var records int
	for _, in := range infos {
		if signals.IsInternalLeaseKey(in.Key) {
			records++
		} else if !strings.HasPrefix(in.Key, signals.LeaseKey("")) {
			t.Errorf("lease %q is neither a thread lease nor internal", in.Key)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for records < 2 && time.Now().Before(deadline) {
		infos, _ = b.ListLeases(ctx, "")
		records = 0
		for _, in := range infos {
			if signals.IsInternalLeaseKey(in.Key) {
				records++
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if records != 2 {
		t.Fatalf("%d internal keys (done records) among %+v, want 2", records, infos)
	}
}
