package redisstreams

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// clusterBenchBackend starts a 3-master Cluster and returns a Backend on a
// ClusterClient with go-redis's defaults, as a user makes one.
func clusterBenchBackend(b *testing.B) *Backend {
	b.Helper()
	redistest.Require(b)
	cl := redistest.StartCluster(b, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	b.Cleanup(func() { _ = c.Close() })
	be, err := New(c, Options{MaxLen: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be
}

// BenchmarkLeaseCycleCluster is BenchmarkLeaseCycle (16 goroutines, each
// AcquireLease + ReleaseLease on a key of its own) on a 3-master Cluster:
// calls are batched per master (lanes).
func BenchmarkLeaseCycleCluster(b *testing.B) {
	be := clusterBenchBackend(b)
	b.SetParallelism(benchParallelism())
	leaseCycles(b, be)
}

// BenchmarkPublishPipelinedCluster is BenchmarkPublishPipelined (64
// publishers) on a 3-master Cluster, each publisher to a topic of its own,
// so that the events spread over the masters.
func BenchmarkPublishPipelinedCluster(b *testing.B) {
	be := clusterBenchBackend(b)
	var seq atomic.Int64
	ctx := context.Background()
	b.SetParallelism(psBenchPublishers)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		topic := fmt.Sprint("bench-", seq.Add(1))
		for pb.Next() {
			if err := be.Publish(ctx, topic, pubsub.Event{Type: "bench", Data: []byte(`{"n":12345,"s":"payload"}`)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
