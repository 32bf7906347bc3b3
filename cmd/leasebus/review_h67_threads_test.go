package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReviewH67ThreadsShowsSignalsNobodyHolds: the owner of a thread is cut
// off from Redis for good (a black-holed proxy: to the server, a process
// that died) with a run in flight and a signal queued, and no other runtime
// is up (every worker of the deployment is down: the 3 a.m. case). Once its
// lease ran out, the library's own state (Controller.Status) says the
// thread has 1 signal queued and 1 in flight and no holder. "leasebus
// threads" must show that thread and its waiting signals, not "no threads
// held" as if nothing were waiting.
//
// Found by review h67 (2026-11-29): "no threads held", exit 0 (3 of 3):
// the listing walked the leases only, so a thread whose signals wait for
// a runtime to take them over was invisible.
func TestReviewH67ThreadsShowsSignalsNobodyHolds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	p := redistest.NewProxy(t, srv.Addr())
	b, err := redisstreams.NewURL(ctx, "redis://"+p.Addr(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 10)
	agent := func(ctx context.Context, run *signals.Run) error {
		started <- run.Signals[0].ID
		<-ctx.Done()
		return ctx.Err()
	}
	const ttl = time.Second
	rt, err := signals.New(b, agent, signals.WithProcessID("web-1"), signals.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Restore()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
		_ = b.Shutdown(cctx)
	})
	for _, id := range []string{"block", "next"} {
		if _, err := rt.Send(ctx, "chat-7", signals.Signal{ID: id, Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	p.BlackHole() // web-1 is gone, as far as Redis can tell

	ob, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	c, err := signals.NewController(ctx, ob)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var st signals.ThreadStatus
	deadline := time.Now().Add(ttl + 10*time.Second)
	for {
		st, err = c.Status(ctx, "chat-7")
		if err != nil {
			t.Fatal(err)
		}
		if st.Owner == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of chat-7 did not run out: %+v", st)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's clock, not injectable
	}
	t.Logf("library: %+v", st)
	if st.Queued+st.InFlight != 2 {
		t.Fatalf("Controller.Status = %+v; want 2 signals waiting (queued + in flight)", st)
	}

	r := leasebus(t, 20*time.Second, "threads", "--redis", srv.URL())
	t.Logf("threads: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("threads: exit %d, stderr %q", r.code, r.stderr)
	}
	var row []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "chat-7" {
			row = f
		}
	}
	if row == nil {
		t.Fatalf("threads printed %q; want chat-7, whose %d queued and %d in-flight signals wait with no holder", r.stdout, st.Queued, st.InFlight)
	}
	// THREAD PROCESS RUN TOKEN TIME-LEFT QUEUED IN-FLIGHT LAST
	if !strings.Contains(r.stdout, "QUEUED") || len(row) < 8 || row[1] != "-" || row[5] != fmt.Sprint(st.Queued) || row[6] != fmt.Sprint(st.InFlight) {
		t.Fatalf("threads row %q; want chat-7 with no process, %d queued and %d in flight", row, st.Queued, st.InFlight)
	}
}
