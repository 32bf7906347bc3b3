package inmem_test

import (
	"testing"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestGroupBacklog(t *testing.T) {
	pubsubtest.RunBacklog(t, func(t *testing.T) pubsub.PubSub {
		b := inmem.New()
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}
