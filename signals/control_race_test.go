package signals_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// Review revA (helper 13, 2026-11-27) of 55863bd: a standalone Controller
// subscribes to the control topic at its first Cancel that asks another
// process.

func heldByGone(t *testing.T, url, prefix, thread string) {
	t.Helper()
	b, err := redisstreams.NewURL(context.Background(), url, redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.AcquireLease(context.Background(), signals.LeaseKey(thread), "gone-7/run-1", time.Minute); err != nil {
		t.Fatal(err)
	}
}

// proxiedController starts a server where thread "t" is held by a process
// that is gone, and returns it, a proxy in front of it, and a standalone
// Controller on a NewURL Backend through the proxy (closed within 1s at the
// end; the server resumed if paused).
func proxiedController(t *testing.T) (*redistest.Server, *redistest.Proxy, *signals.Controller) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	heldByGone(t, srv.URL(), "rv", "t")
	p := redistest.NewProxy(t, srv.Addr())
	b, err := redisstreams.NewURL(context.Background(), "redis://"+p.Addr(), redisstreams.Options{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	c, err := signals.NewController(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Resume(t) })
	return srv, p, c
}

// TestFirstCancelStoppedRedis: the first Cancel of a standalone
// Controller on a Redis that stopped answering (SIGSTOP) returns within its
// ctx (1s, +1s slack) with an error wrapping ErrUnreachable, whether Redis
// stops before the owner read or at the control subscription's setup
// (XINFO STREAM), and Close afterwards is prompt.
func TestFirstCancelStoppedRedis(t *testing.T) {
	t.Parallel() // mostly waits (TTLs, windows, a stalled server): beside another (CI time)
	for _, trigger := range []string{"", "xinfo", "xadd"} {
		t.Run(fmt.Sprintf("at=%q", trigger), func(t *testing.T) {
			srv, p, c := proxiedController(t)
			if trigger == "" {
				srv.Pause(t)
			} else {
				hit := make(chan struct{})
				p.HoldNext(func(w []byte) bool {
					if bytesContainsFold(w, trigger) {
						close(hit)
						return true
					}
					return false
				})
				go func() {
					select {
					case <-hit:
						srv.Pause(t)
					case <-time.After(10 * time.Second):
					}
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			_, err := c.Cancel(ctx, "t", "review")
			d := time.Since(start)
			t.Logf("Cancel returned after %v: %v", d.Round(time.Millisecond), err)
			if !errors.Is(err, signals.ErrUnreachable) || d > 2*time.Second {
				t.Errorf("Cancel = %v after %v; want ErrUnreachable within 2s", err, d.Round(time.Millisecond))
			}
			start = time.Now()
			done := make(chan error, 1)
			go func() { done <- c.Close() }()
			select {
			case err := <-done:
				t.Logf("Close returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(5 * time.Second):
				t.Errorf("Close did not return within 5s")
				srv.Resume(t)
				<-done
			}
		})
	}
}

func bytesContainsFold(b []byte, s string) bool {
	return containsFold(string(b), s)
}

func containsFold(a, b string) bool {
	la, lb := []byte(a), []byte(b)
	for i := range la {
		if la[i] >= 'A' && la[i] <= 'Z' {
			la[i] += 'a' - 'A'
		}
	}
	for i := range lb {
		if lb[i] >= 'A' && lb[i] <= 'Z' {
			lb[i] += 'a' - 'A'
		}
	}
	return len(lb) == 0 || indexOf(la, lb) >= 0
}

func indexOf(a, b []byte) int {
	for i := 0; i+len(b) <= len(a); i++ {
		if string(a[i:i+len(b)]) == string(b) {
			return i
		}
	}
	return -1
}

// TestLazySubscribeAnswered: fresh standalone Controllers (so the
// subscription is made lazily, right before the request goes out) cancel a
// run of a Runtime on the same Redis: every Cancel must get the answer
// (Cancelled), none time out because the answer came before the
// subscription read.
func TestLazySubscribeAnswered(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	rb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close() })
	ag := newBlocker()
	rt := newRuntime(t, rb, ag.agent, signals.WithProcessID("p1"))
	cb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cb.Close() })
	for i := range 15 {
		id := fmt.Sprintf("block-%d", i)
		if _, err := rt.Send(ctx, "t", sig(id)); err != nil {
			t.Fatal(err)
		}
		ag.expect(t, id)
		c, err := signals.NewController(ctx, cb)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := c.Cancel(cctx, "t", "review")
		cancel()
		if err != nil || !res.Cancelled {
			t.Errorf("Cancel %d = %+v, %v; want Cancelled", i, res, err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// TestCancelCloseRace: Cancel and Close of a fresh Controller at
// once (each round on a thread of its own, held by a blocked run of p1):
// Cancel returns (a result, ErrClosed, or ErrUnreachable), Close returns,
// and no subscription is left behind (goleak in TestMain). A Cancel that
// Close overtook after it subscribed must not wait out its ctx.
//
// Before (also before 55863bd: 11 of 30 rounds there, 13 of 30 after it):
// Close unsubscribed while ask waited for the answer on a channel Close
// never signalled, so the Cancel waited out its whole ctx and reported
// ErrUnreachable "p1 did not answer", although p1 may have cancelled the
// run. Close now wakes it: ErrClosed, saying the request went out.
func TestCancelCloseRace(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	rb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close() })
	ag := newBlocker()
	rt := newRuntime(t, rb, ag.agent, signals.WithProcessID("p1"))
	cb, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "rv"})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	var slow []string
	for i := range 20 {
		th := fmt.Sprintf("t%d", i)
		if _, err := rt.Send(ctx, th, sig("block-"+th)); err != nil {
			t.Fatal(err)
		}
		ag.expect(t, "block-"+th)
		c, err := signals.NewController(ctx, cb)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var cerr error
		var res signals.CancelResult
		var took time.Duration
		wg.Add(2)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			start := time.Now()
			res, cerr = c.Cancel(cctx, th, "race")
			took = time.Since(start)
		}()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%10) * 300 * time.Microsecond)
			_ = c.Close()
		}()
		wg.Wait()
		switch {
		case cerr == nil && res.Cancelled:
			outcomes["cancelled"]++
		case errors.Is(cerr, signals.ErrClosed):
			outcomes["closed"]++
		case errors.Is(cerr, signals.ErrUnreachable):
			outcomes["unreachable"]++
		default:
			outcomes[fmt.Sprintf("other %+v %v", res, cerr)]++
		}
		if took > time.Second {
			slow = append(slow, fmt.Sprintf("round %d: Cancel took %v: %v", i, took.Round(time.Millisecond), cerr))
		}
		// End the blocked run, if this round did not.
		_, _ = rt.Cancel(ctx, th, "round over")
	}
	t.Logf("outcomes: %v", outcomes)
	for _, s := range slow {
		t.Log(s)
	}
	if len(slow) > 0 {
		t.Errorf("%d of 20 Cancels racing Close waited out their ctx (2s) and returned ErrUnreachable (\"p1 did not answer\") instead of ErrClosed", len(slow))
	}
	if err := cb.Close(); err != nil {
		t.Errorf("backend Close: %v", err)
	}
}

// TestCloseDuringStuckFirstCancel: Close while the first Cancel
// of a standalone Controller waits on a Redis that stopped answering
// (SIGSTOP, at the control subscription's XINFO STREAM, then the XADD of
// the request): Close takes no ctx and must not wait for the Cancel.
//
// Found in 55863bd (which made the subscription lazy): at XINFO, Close
// returned after 3.8s, the rest of the Cancel's 4s ctx, since Close waited
// for the Subscribe in flight; a Cancel with a long ctx (threads cancel
// --timeout 30s, or a library caller's) held Close as long. Close now does
// not wait: the Cancel undoes a subscription Close overtook.
func TestCloseDuringStuckFirstCancel(t *testing.T) {
	t.Parallel() // waits on a stalled server or a TTL, hardly any CPU: beside the others (CI time)
	for _, trigger := range []string{"xinfo", "xadd"} {
		t.Run(trigger, func(t *testing.T) {
			srv, p, c := proxiedController(t)
			hit := make(chan struct{})
			p.HoldNext(func(w []byte) bool {
				if bytesContainsFold(w, trigger) {
					close(hit)
					return true
				}
				return false
			})
			cdone := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				defer cancel()
				_, err := c.Cancel(ctx, "t", "review")
				cdone <- err
			}()
			<-hit
			srv.Pause(t)
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			_ = c.Close()
			d := time.Since(start)
			err := <-cdone
			t.Logf("Close returned after %v; Cancel: %v", d.Round(time.Millisecond), err)
			if d > time.Second {
				t.Errorf("Close took %v (the in-flight Cancel's ctx), on a Redis that stopped answering", d.Round(time.Millisecond))
			}
		})
	}
}
