package pubsubtest

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// benchData is the payload of benchmark events.
var benchData = json.RawMessage(`{"thread":"t-42","kind":"bench","n":1}`)

// BenchPublish measures Publish of small events to one topic that nobody
// subscribes to, from one goroutine, and reports events/s. ps is not closed.
func BenchPublish(b *testing.B, ps pubsub.PubSub) {
	b.Helper()
	topic := uniqueTopic("bench.publish")
	ctx := context.Background()
	e := pubsub.Event{Type: "bench", Data: benchData}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := ps.Publish(ctx, topic, e); err != nil {
			b.Fatalf("Publish: %v", err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchEndToEnd measures publish-to-handler throughput: publishers goroutines
// publish b.N events in total to one topic, and the benchmark ends when one
// fan-out subscription (Concurrency 1) has handled all of them. It reports
// events/s. ps is not closed; the subscription is unsubscribed.
func BenchEndToEnd(b *testing.B, ps pubsub.PubSub, publishers int) {
	b.Helper()
	publishers = max(publishers, 1)
	topic := uniqueTopic("bench.e2e")
	ctx := context.Background()
	total := int64(b.N)
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := ps.Subscribe(ctx, topic, func(context.Context, pubsub.Event) error {
		if got.Add(1) == total {
			close(done)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("Subscribe: %v", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sub.Unsubscribe(uctx); err != nil {
			b.Errorf("Unsubscribe: %v", err)
		}
	}()

	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		n := b.N / publishers
		if p < b.N%publishers {
			n++
		}
		wg.Go(func() {
			e := pubsub.Event{Type: "bench", Data: benchData}
			for range n {
				if err := ps.Publish(ctx, topic, e); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("Publish: %v", err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("handled %d of %d events within a minute", got.Load(), total)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
