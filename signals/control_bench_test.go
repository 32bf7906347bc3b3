package signals_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// BenchmarkCancel measures Runtime.Cancel latency across two runtimes on
// one redis-server (loopback), each on its own default go-redis client
// (redisstreams.NewURL): the owner runs a thread whose agent waits for its
// ctx; each iteration sends one signal to the thread, waits until the agent
// runs it, and cancels it from the other runtime. p50-µs/p99-µs are Cancel
// start → the run's ctx done (as the agent sees it); answer-p50-µs and
// answer-p99-µs are Cancel's own duration (until the owner's answer came
// back).
func BenchmarkCancel(b *testing.B) {
	srv := benchStart(b)
	ctx := context.Background()
	newBackend := func() *redisstreams.Backend {
		be, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		return be
	}
	type start struct {
		id   string
		done chan time.Time
	}
	started := make(chan start, 1)
	agent := func(ctx context.Context, run *signals.Run) error {
		s := start{id: run.Signals[0].ID, done: make(chan time.Time, 1)}
		started <- s
		<-ctx.Done()
		s.done <- time.Now()
		return nil
	}
	owner, err := signals.New(newBackend(), agent, signals.WithProcessID("owner"))
	if err != nil {
		b.Fatal(err)
	}
	other, err := signals.New(newBackend(), func(context.Context, *signals.Run) error { return nil }, signals.WithProcessID("other"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = other.Close(ctx)
		_ = owner.Close(ctx)
	})
	lat := make([]time.Duration, 0, b.N)
	answer := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("s%d", i)
		if _, err := owner.Send(ctx, "bench", signals.Signal{ID: id, Type: "msg"}); err != nil {
			b.Fatal(err)
		}
		var s start
		select {
		case s = <-started:
		case <-time.After(30 * time.Second):
			b.Fatalf("signal %s did not start within 30s", id)
		}
		if s.id != id {
			b.Fatalf("agent started %s, want %s", s.id, id)
		}
		t0 := time.Now()
		res, err := other.Cancel(ctx, "bench", "bench")
		answered := time.Since(t0)
		if err != nil || !res.Cancelled {
			b.Fatalf("Cancel = %+v, %v", res, err)
		}
		doneAt := <-s.done
		lat = append(lat, doneAt.Sub(t0))
		answer = append(answer, answered)
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(answer)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(benchPercentile(lat, 0.50)), "p50-µs")
	b.ReportMetric(us(benchPercentile(lat, 0.99)), "p99-µs")
	b.ReportMetric(us(benchPercentile(lat, 1)), "max-µs")
	b.ReportMetric(us(benchPercentile(answer, 0.50)), "answer-p50-µs")
	b.ReportMetric(us(benchPercentile(answer, 0.99)), "answer-p99-µs")
}
