package pubsubtest_test

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/pubsub/pubsubtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// plain is a backend without groups and without Earliest: it refuses them,
// so the suite proves that it asks for them only where a Feature allows.
type plain struct{ pubsub.PubSub }

func (p plain) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if c, err := pubsub.ApplyOptions(opts...); err == nil {
		if c.Group != "" {
			return nil, fmt.Errorf("plain: groups are not supported")
		}
		if c.StartFrom == pubsub.Earliest {
			return nil, fmt.Errorf("plain: Earliest is not supported")
		}
	}
	return p.PubSub.Subscribe(ctx, topic, h, opts...)
}

// TestRunHonoursFeatures runs the suite with every Feature off against a
// backend that fails when a Feature is used: gated subtests must skip, the
// others must pass without those capabilities.
func TestRunHonoursFeatures(t *testing.T) {
	pubsubtest.Run(t, pubsubtest.Config{
		New: func(*testing.T) pubsub.PubSub { return plain{inmem.New()} },
	})
}
