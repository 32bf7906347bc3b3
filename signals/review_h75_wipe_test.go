package signals_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/signals"
)

// h75Rig is the agent of TestReviewH75WipedServerUnderLoad: it records
// every signal run (how often, and whether marked Redelivered) and every
// moment two runs of one thread overlapped.
type h75Rig struct {
	mu       sync.Mutex
	ran      map[string]int               // signal id -> times given to an agent
	unmarked map[string]int               // signal id -> times given not marked Redelivered
	active   map[string]map[string]uint64 // thread -> run id -> token, for the runs in the agent now
	overlaps []string                     // of two runs whose leases were taken after the wipe
	earlier  int                          // overlaps with a run whose lease was taken before the wipe
	wipedAt  uint64                       // the wipe was over by then (Unix µs, as the tokens count)
	wipeFrom uint64                       // the wipe began after (Unix µs)
	lastOld  time.Time                    // when the last run whose lease was taken before the wipe returned
}

func newH75Rig() *h75Rig {
	return &h75Rig{ran: map[string]int{}, unmarked: map[string]int{}, active: map[string]map[string]uint64{}}
}

func (r *h75Rig) agent(proc string) signals.Agent {
	return func(ctx context.Context, run *signals.Run) error {
		r.mu.Lock()
		post := func(token uint64) bool { return r.wipedAt != 0 && token > r.wipedAt }
		if r.active[run.Thread] == nil {
			r.active[run.Thread] = map[string]uint64{}
		}
		for other, tok := range r.active[run.Thread] {
			if post(run.Token) && post(tok) {
				r.overlaps = append(r.overlaps, fmt.Sprintf("%s: run %s (token %d) on %s started while run %s ran", run.Thread, run.ID, run.Token, proc, other))
			} else {
				r.earlier++
			}
		}
		r.active[run.Thread][run.ID] = run.Token
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			delete(r.active[run.Thread], run.ID)
			if r.wipeFrom != 0 && run.Token < r.wipeFrom {
				r.lastOld = time.Now()
			}
			r.mu.Unlock()
		}()
		return eachSignal(ctx, run, func(s signals.Signal) {
			r.mu.Lock()
			r.ran[s.ID]++
			if !s.Redelivered {
				r.unmarked[s.ID]++
			}
			r.mu.Unlock()
			d := time.Duration(rand.IntN(10)) * time.Millisecond
			if strings.HasPrefix(s.ID, "long") {
				d = 20 * time.Second // until its lease is lost
			}
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		})
	}
}

// TestReviewH75WipedServerUnderLoad: three runtimes (NewURL backends, as a
// user builds them) with busy threads and queued signals when Redis loses
// everything: a restart without persistence, or FLUSHALL. The signals
// accepted before are lost (README, "Not offered"); every signal whose Send
// began after the wipe and returned nil must run, once unless marked
// Redelivered, and no two runs started after the wipe may overlap on a
// thread; each runtime's Close must return within its bound.
func TestReviewH75WipedServerUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("15s of load")
	}
	for _, how := range []string{"Restart", "FlushAll"} {
		t.Run(how, func(t *testing.T) { h75Wiped(t, how) })
	}
}

func h75Wiped(t *testing.T, how string) {
	srv := redistest.Start(t, redistest.Options{})
	const ttl = 2 * time.Second
	prefix := fmt.Sprintf("h75%d", rand.Int64())
	rig := newH75Rig()
	var rts []*signals.Runtime
	var stops []func()
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		rt, stop := urlRuntime(t, srv.URL(), prefix, id, rig.agent(id), nil,
			signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(200*time.Millisecond), signals.WithLinger(50*time.Millisecond))
		rts = append(rts, rt)
		stops = append(stops, stop)
	}

	var (
		mu     sync.Mutex
		wiped  bool
		after  []string // ids whose Send began after the wipe and returned nil
		failed int
	)
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for w := range 6 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				post := wiped
				mu.Unlock()
				id := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := rts[rand.IntN(len(rts))].Send(ctx, fmt.Sprintf("t%d", rand.IntN(40)), signals.Signal{ID: id, Type: "msg"})
				cancel()
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if post {
					mu.Lock()
					after = append(after, id)
					mu.Unlock()
				}
				time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		senders.Wait()
	}()

	for i, rt := range rts {
		// Runs busy until their leases are lost, one per runtime.
		if _, err := rt.Send(context.Background(), fmt.Sprintf("long%d", i), signals.Signal{ID: fmt.Sprintf("long%d", i), Type: "msg"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	rig.mu.Lock()
	rig.wipeFrom = uint64(time.Now().UnixMicro())
	rig.mu.Unlock()
	switch how {
	case "Restart":
		srv.Kill(t)
		srv.Restart(t)
	case "FlushAll":
		if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
	}
	mu.Lock()
	wiped = true
	mu.Unlock()
	rig.mu.Lock()
	rig.wipedAt = uint64(time.Now().UnixMicro())
	rig.mu.Unlock()
	wipeDone := time.Now()
	time.Sleep(4 * time.Second)
	close(stop)
	senders.Wait()

	mu.Lock()
	want := append([]string(nil), after...)
	nfailed := failed
	mu.Unlock()
	if len(want) < 100 {
		t.Fatalf("only %d signals accepted after the wipe (%d Sends failed)", len(want), nfailed)
	}
	bound := 3*ttl + 5*time.Second
	deadline := time.Now().Add(bound)
	var missing, twice []string
	for {
		missing, twice = nil, nil
		rig.mu.Lock()
		for _, id := range want {
			switch {
			case rig.ran[id] == 0:
				missing = append(missing, id)
			case rig.unmarked[id] > 1:
				twice = append(twice, id)
			}
		}
		rig.mu.Unlock()
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d of %d signals accepted after the %s did not run within %v, e.g. %v", len(missing), len(want), how, bound, missing[:min(8, len(missing))])
	}
	if len(twice) > 0 {
		t.Errorf("%d signals accepted after the %s ran more than once unmarked, e.g. %v", len(twice), how, twice[:min(8, len(twice))])
	}
	rig.mu.Lock()
	post, earlier, lastOld := append([]string(nil), rig.overlaps...), rig.earlier, rig.lastOld
	rig.mu.Unlock()
	t.Logf("%s: %d signals accepted after it (%d Sends failed in all); %d overlaps with runs whose leases were taken before it; the last such run returned %v after the wipe", how, len(want), nfailed, earlier, lastOld.Sub(wipeDone).Round(time.Millisecond))
	// The runs whose leases the wipe took end at their next renewal (the
	// lease is gone): within a renew interval (TTL/3) and its round trip.
	if d := lastOld.Sub(wipeDone); d > ttl/3+time.Second {
		t.Errorf("a run whose lease was lost in the %s returned only %v after it", how, d)
	}
	for _, o := range post {
		t.Errorf("overlap after the %s: %s", how, o)
	}
	for i, stop := range stops {
		began := time.Now()
		stop()
		if d := time.Since(began); d > ttl+3*time.Second {
			t.Errorf("runtime p%d: Close took %v (TTL %v)", i, d, ttl)
		}
	}
}

// TestReviewH75CancelAfterWipe: the control topic comes back by itself
// after Redis lost everything (a restart without persistence, FLUSHALL):
// a Cancel from one runtime reaches a run that started after the wipe on
// another, as it did before.
func TestReviewH75CancelAfterWipe(t *testing.T) {
	for _, how := range []string{"Restart", "FlushAll"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			prefix := fmt.Sprintf("h75c%d", rand.Int64())
			started := make(chan signals.Run, 4)
			ended := make(chan error, 4)
			agent := func(ctx context.Context, run *signals.Run) error {
				started <- *run
				<-ctx.Done()
				ended <- context.Cause(ctx)
				return nil
			}
			opts := []signals.Option{signals.WithLeaseTTL(2 * time.Second), signals.WithRecoveryInterval(200 * time.Millisecond), signals.WithLinger(50 * time.Millisecond)}
			a, _ := urlRuntime(t, srv.URL(), prefix, "A", agent, nil, opts...)
			b, _ := urlRuntime(t, srv.URL(), prefix, "B", agent, nil, opts...)
			cancelFrom := func(label, thread string) {
				t.Helper()
				if _, err := b.Send(t.Context(), thread, signals.Signal{ID: label, Type: "msg"}); err != nil {
					t.Fatalf("Send %s: %v", label, err)
				}
				select {
				case <-started:
				case <-time.After(10 * time.Second):
					t.Fatalf("run of %s did not start", label)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				res, err := a.Cancel(ctx, thread, "stop")
				if err != nil || !res.Cancelled {
					t.Fatalf("Cancel of %s from A: %+v, %v", label, res, err)
				}
				select {
				case <-ended:
				case <-time.After(5 * time.Second):
					t.Fatalf("cancelled run of %s did not end", label)
				}
			}
			cancelFrom("before", "t-before")
			switch how {
			case "Restart":
				srv.Kill(t)
				srv.Restart(t)
			case "FlushAll":
				if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			cancelFrom("after", "t-after")
		})
	}
}

// TestReviewH75CloseRightAfterWipe: a runtime with runs busy (leases that
// the wipe took) is closed right after Redis lost everything: Close returns
// within its bound (the runs end at their next renewal, which finds no
// lease; the teardown about a TTL after the last run), and the other
// runtime runs the signals sent to those threads after the wipe.
func TestReviewH75CloseRightAfterWipe(t *testing.T) {
	for _, how := range []string{"Restart", "FlushAll"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			prefix := fmt.Sprintf("h75x%d", rand.Int64())
			const ttl = 2 * time.Second
			ran := make(chan string, 16)
			agent := func(ctx context.Context, run *signals.Run) error {
				return eachSignal(ctx, run, func(s signals.Signal) {
					ran <- s.ID
					if strings.HasPrefix(s.ID, "busy") {
						<-ctx.Done()
					}
				})
			}
			opts := []signals.Option{signals.WithLeaseTTL(ttl), signals.WithRecoveryInterval(200 * time.Millisecond), signals.WithLinger(50 * time.Millisecond)}
			a, stopA := urlRuntime(t, srv.URL(), prefix, "A", agent, nil, opts...)
			b, _ := urlRuntime(t, srv.URL(), prefix, "B", agent, nil, opts...)
			for i := range 3 {
				if _, err := a.Send(t.Context(), fmt.Sprintf("t%d", i), signals.Signal{ID: fmt.Sprintf("busy%d", i), Type: "msg"}); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				select {
				case <-ran:
				case <-time.After(10 * time.Second):
					t.Fatal("busy runs did not start")
				}
			}
			switch how {
			case "Restart":
				srv.Kill(t)
				srv.Restart(t)
			case "FlushAll":
				if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			began := time.Now()
			stopA()
			if d := time.Since(began); d > ttl+3*time.Second {
				t.Errorf("Close right after the %s took %v (TTL %v)", how, d, ttl)
			}
			t.Logf("Close right after the %s took %v", how, time.Since(began).Round(time.Millisecond))
			for i := range 3 {
				if _, err := b.Send(t.Context(), fmt.Sprintf("t%d", i), signals.Signal{ID: fmt.Sprintf("after%d", i), Type: "msg"}); err != nil {
					t.Fatal(err)
				}
			}
			got := map[string]bool{}
			for deadline := time.After(10 * time.Second); len(got) < 3; {
				select {
				case id := <-ran:
					if strings.HasPrefix(id, "after") {
						got[id] = true
					}
				case <-deadline:
					t.Fatalf("signals sent after the %s and the Close: only %v ran", how, got)
				}
			}
		})
	}
}
