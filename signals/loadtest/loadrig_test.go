package loadtest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// What the load tests with a fault (TestBlackHoleOneRuntimeUnderLoad,
// TestSentinelFailoverUnderLoad) share: the agent's record of runs and
// deliveries, and the checks that every accepted signal was given and that
// nothing stays stuck. Their sends go through loadSender (late_load_test.go).

// bhRun is one run of the agent as the agent saw it.
type bhRun struct {
	proc, thread, id string
	token            uint64
	start, end       time.Time // end: the agent saw its ctx end, or returned
	cancelled        bool
	sigs             []string
}

// bhLog records the runs and the deliveries of a load test
// (TestBlackHoleOneRuntimeUnderLoad, TestSentinelFailoverUnderLoad).
type bhLog struct {
	mu    sync.Mutex
	runs  []*bhRun
	given map[string][]loadGiven
}

// agent records each run and its signals, and runs busy-* threads' runs
// 1-3s, the others' 0-5ms, or until the run's ctx ends.
func (l *bhLog) agent(proc string) signals.Agent {
	return func(ctx context.Context, r *signals.Run) error {
		now := time.Now()
		run := &bhRun{proc: proc, thread: r.Thread, id: r.ID, token: r.Token, start: now}
		l.mu.Lock()
		l.runs = append(l.runs, run)
		for i, s := range r.Signals {
			red := i < len(r.Redelivered) && r.Redelivered[i]
			l.given[s.ID] = append(l.given[s.ID], loadGiven{at: now, redelivered: red, proc: proc})
			run.sigs = append(run.sigs, s.ID)
		}
		l.mu.Unlock()
		d := time.Duration(rand.IntN(5)) * time.Millisecond
		if strings.HasPrefix(r.Thread, "busy-") {
			d = time.Second + time.Duration(rand.IntN(2000))*time.Millisecond
		}
		t := time.NewTimer(d)
		defer t.Stop()
		cancelled := false
		select {
		case <-t.C:
		case <-ctx.Done():
			cancelled = true
		}
		end := time.Now()
		l.mu.Lock()
		run.end, run.cancelled = end, cancelled
		l.mu.Unlock()
		return nil
	}
}

// byThread returns l's runs per thread, by start time. l.mu is held.
func (l *bhLog) byThread() map[string][]*bhRun {
	m := map[string][]*bhRun{}
	for _, r := range l.runs {
		m[r.thread] = append(m[r.thread], r)
	}
	for _, rs := range m {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
	}
	return m
}

// runOverlaps describes each pair of thread's runs rs (by start time) that
// ran at once (a run lasts until its agent saw its ctx end or returned;
// one not over yet, until now), with times from ref, named refName.
func runOverlaps(thread string, rs []*bhRun, ref time.Time, refName string) []string {
	var out []string
	for i, r := range rs {
		end := r.end
		if end.IsZero() {
			end = time.Now()
		}
		for _, q := range rs[i+1:] {
			if q.start.Before(end) {
				out = append(out, fmt.Sprintf("%s: run %s on %s (token %d, %+.3fs..%+.3fs from %s, cancelled=%v) and run %s on %s (token %d, started %+.3fs) at once",
					thread, r.id, r.proc, r.token, r.start.Sub(ref).Seconds(), end.Sub(ref).Seconds(), refName, r.cancelled, q.id, q.proc, q.token, q.start.Sub(ref).Seconds()))
			}
		}
	}
	return out
}

// waitGiven waits until every signal of accepted that want picks was given
// to an agent, and fails t with the first 30 missing (their sender from
// sendProc, their send time from ref, named refName) if some were not by
// deadline.
func (l *bhLog) waitGiven(t *testing.T, accepted map[string]loadSend, sendProc map[string]string, want func(loadSend) bool, ref time.Time, refName string, deadline time.Time) {
	t.Helper()
	for {
		var missing []string
		l.mu.Lock()
		for id, s := range accepted {
			if want(s) && len(l.given[id]) == 0 {
				missing = append(missing, fmt.Sprintf("%s(%s by %s, sent %+.3fs from %s)", id, s.thread, sendProc[id], s.start.Sub(ref).Seconds(), refName))
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			t.Errorf("%d accepted signals never given by the deadline: %v", len(missing), missing[:min(len(missing), 30)])
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadThreads returns the names of a load's threads: busy-0.. and short-0...
func loadThreads(busy, short int) []string {
	var ths []string
	for i := range busy {
		ths = append(ths, fmt.Sprint("busy-", i))
	}
	for i := range short {
		ths = append(ths, fmt.Sprint("short-", i))
	}
	return ths
}

// checkSettled waits up to bound until nothing of threads stays stuck (no
// lease held, every inbox group and the work group without pending or
// unread entries), and fails t with what is left otherwise.
func checkSettled(t *testing.T, look *redisstreams.Backend, threads []string, bound time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(bound)
	var left []string
	for {
		left = left[:0]
		for _, th := range threads {
			o, err := look.GetLeaseOwner(ctx, signals.LeaseKey(th))
			if err != nil {
				t.Fatal(err)
			}
			if o != "" {
				left = append(left, fmt.Sprintf("lease of %s held by %s", th, o))
			}
			bl, err := look.GroupBacklog(ctx, signals.InboxTopic(th), signals.InboxGroup)
			if err != nil {
				t.Fatal(err)
			}
			if bl.Pending != 0 || bl.Lag != 0 {
				left = append(left, fmt.Sprintf("inbox of %s: %d pending, %d unread", th, bl.Pending, bl.Lag))
			}
		}
		bl, err := look.GroupBacklog(ctx, signals.WorkTopic, signals.WorkGroup)
		if err != nil {
			t.Fatal(err)
		}
		if bl.Pending != 0 || bl.Lag != 0 {
			left = append(left, fmt.Sprintf("work group: %d pending, %d unread", bl.Pending, bl.Lag))
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after every signal was given, still stuck (%d): %v", bound, len(left), left[:min(len(left), 20)])
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
