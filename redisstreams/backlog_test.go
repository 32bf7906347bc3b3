package redisstreams

import (
	"testing"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestGroupBacklog(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	pubsubtest.RunBacklog(t, func(t *testing.T) pubsub.PubSub {
		return psBackend(t, srv.Client(t), Options{})
	})
}

func TestIDTime(t *testing.T) {
	for id, want := range map[string]int64{"1700000000123-4": 1700000000123, "0-0": 0, "": 0, "x-1": 0} {
		got := idTime(id)
		if (want == 0) != got.IsZero() || (want != 0 && got.UnixMilli() != want) {
			t.Errorf("idTime(%q) = %v, want %d ms", id, got, want)
		}
	}
}
