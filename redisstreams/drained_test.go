package redisstreams

import (
	"testing"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestDrainedDeleter(t *testing.T) {
	redistest.ForEachDeployment(t, func(t *testing.T, d *redistest.Deployed) {
		pubsubtest.RunDrainedDeleter(t, func(t *testing.T) pubsub.PubSub {
			return psBackend(t, d.NewClient(t), Options{Prefix: psPrefix()})
		})
	})
}
