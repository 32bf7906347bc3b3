package main

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
)

// wmPubSub is watermill-redisstream with its defaults, except that the
// initial read does not block forever (so unsubscribing ends) and streams are
// capped like every contender's.
type wmPubSub struct {
	c   redis.UniversalClient
	pub *redisstream.Publisher
}

// keepOpen hides Close from watermill, whose Publisher.Close and
// Subscriber.Close close the client they were given; the benchmark owns it.
type keepOpen struct{ redis.UniversalClient }

func (keepOpen) Close() error { return nil }

func newWatermill(c *redis.Client) (pubsubBackend, error) {
	uc := keepOpen{c}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: uc, DefaultMaxlen: streamMaxLen}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	return &wmPubSub{c: uc, pub: pub}, nil
}

func (w *wmPubSub) Publish(ctx context.Context, topic string, payload []byte) error {
	m := message.NewMessage(watermill.NewUUID(), payload)
	m.SetContext(ctx)
	return w.pub.Publish(topic, m)
}

func (w *wmPubSub) Subscribe(ctx context.Context, topic, group string, h func([]byte)) (func() error, error) {
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:                        w.c,
		ConsumerGroup:                 group,
		OldestId:                      "$",
		DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	subCtx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(subCtx, topic)
	if err != nil {
		cancel()
		_ = sub.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range msgs {
			h(m.Payload)
			m.Ack()
		}
	})
	return func() error {
		cancel()
		err := sub.Close()
		wg.Wait()
		return err
	}, nil
}

func (w *wmPubSub) Close() error { return w.pub.Close() }
