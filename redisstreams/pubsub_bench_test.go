package redisstreams

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// The benchmarks run on a private redis-server. Each leasebus benchmark has
// a plain go-redis baseline doing the same Redis work the way a careful
// hand-written program would, so the ratio shows the library's overhead:
//
//	go test ./redisstreams/ -run '^$' -bench 'Publish|RawXAdd|EndToEnd|RawXAddXRead' -benchtime 20000x

// psBenchPublishers is the number of concurrent publishers of the
// pipelined benchmarks.
const psBenchPublishers = 64

func psBenchClient(b *testing.B) *redis.Client {
	srv := redistest.Start(b, redistest.Options{})
	return srv.Client(b)
}

// psBenchFields is one encoded event of the size the benchmarks publish.
func psBenchFields() []string {
	f, _, _ := encodeEvent(pubsub.Event{ID: uuid.NewString(), Type: "bench", Data: []byte(`{"n":12345,"s":"payload"}`)})
	return f
}

// BenchmarkPublishPipelined publishes from many goroutines; Publish
// coalesces them into pipelines.
func BenchmarkPublishPipelined(b *testing.B) {
	publishPipelined(b, context.Background())
}

// BenchmarkPublishPipelinedCancelable is BenchmarkPublishPipelined on a ctx
// that can be cancelled, as a request's ctx can: a leader then sends from a
// goroutine of its own (publishUnit), so that it returns when ctx ends.
func BenchmarkPublishPipelinedCancelable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	publishPipelined(b, ctx)
}

// BenchmarkPublishSerial publishes from one goroutine, each Publish alone
// (the leader's direct path), on context.Background and on a ctx that can
// be cancelled.
func BenchmarkPublishSerial(b *testing.B) {
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"Background", context.Background()}, {"Cancelable", cctx}} {
		b.Run(bc.name, func(b *testing.B) {
			be := psBackend(b, psBenchClient(b), Options{MaxLen: -1})
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := be.Publish(bc.ctx, "bench", pubsub.Event{Type: "bench", Data: []byte(`{"n":12345,"s":"payload"}`)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// publishPipelined is BenchmarkPublishPipelined on ctx.
func publishPipelined(b *testing.B, ctx context.Context) {
	be := psBackend(b, psBenchClient(b), Options{MaxLen: -1})
	b.SetParallelism(psBenchPublishers)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := be.Publish(ctx, "bench", pubsub.Event{Type: "bench", Data: []byte(`{"n":12345,"s":"payload"}`)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRawXAddPipelined is the baseline: the same XADDs sent by one
// goroutine in pipelines of DefaultBatchSize.
func BenchmarkRawXAddPipelined(b *testing.B) {
	c := psBenchClient(b)
	ctx := context.Background()
	fields := psBenchFields()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += DefaultBatchSize {
		pipe := c.Pipeline()
		for j := i; j < min(b.N, i+DefaultBatchSize); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "raw", Values: fields})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEndToEnd16 publishes b.N events from 16 goroutines to a topic
// read by one group subscription, and stops when the handler has seen all.
func BenchmarkEndToEnd16(b *testing.B) {
	be := psBackend(b, psBenchClient(b), Options{MaxLen: -1})
	ctx := context.Background()
	var seen atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	sub, err := be.Subscribe(ctx, "e2e", func(context.Context, pubsub.Event) error {
		if seen.Add(1) == n {
			close(done)
		}
		return nil
	}, pubsub.Group("bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 16 {
				if err := be.Publish(ctx, "e2e", pubsub.Event{Type: "bench", Data: []byte(`{"n":12345,"s":"payload"}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-done
	if err := be.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	_ = sub.Unsubscribe(ctx)
}

// BenchmarkRawXAddXReadGroupXAck is the baseline: 16 goroutines each XADD
// one event at a time (as 16 independent publishers would), and one loop
// reads with XREADGROUP COUNT DefaultBatchSize and acks each batch with one
// XACK.
func BenchmarkRawXAddXReadGroupXAck(b *testing.B) {
	c := psBenchClient(b)
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, "raw-e2e", "bench", "$").Err(); err != nil {
		b.Fatal(err)
	}
	fields := psBenchFields()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < b.N; i += 16 {
				if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "raw-e2e", Values: fields}).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for got := 0; got < b.N; {
		res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: "bench", Consumer: "c", Streams: []string{"raw-e2e", ">"},
			Count: DefaultBatchSize, Block: DefaultBlockTime,
		}).Result()
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]string, 0, len(res[0].Messages))
		for _, m := range res[0].Messages {
			if _, err := decodeEvent(m.Values); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, m.ID)
		}
		if err := c.XAck(ctx, "raw-e2e", "bench", ids...).Err(); err != nil {
			b.Fatal(err)
		}
		got += len(ids)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
