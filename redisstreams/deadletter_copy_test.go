package redisstreams

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// TestDeadLetterCarriesTheEventAsDelivered: pubsub/doc.go
// "Copies: each delivery (each attempt, to each subscription) gets its own
// copy of the event: a handler may change its Data and Metadata without
// another delivery seeing it", and "Dead letters: ... an event that failed
// n attempts is published to the topic "<topic>.dead"". A handler that
// changes its copy and then fails must not change what the dead-letter
// topic's subscribers are delivered.
//
// Found by review h53 (2026-11-29): on both backends, fan-out and group,
// the dead letter carried the handler's changes (Data "Zabc", k "changed
// by the handler"): pubsub.Policy.Handle dead-lettered the copy it had
// handed to the handler. Now the last attempt's handler gets a copy of its
// own.
func TestDeadLetterCarriesTheEventAsDelivered(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for name, ps := range map[string]pubsub.PubSub{
		"redis": urlBackend(t, srv.URL(), Options{}),
		"inmem": func() pubsub.PubSub { b := inmem.New(); t.Cleanup(func() { b.Close() }); return b }(),
	} {
		for _, group := range []bool{false, true} {
			sname := name + "/fanout"
			if group {
				sname = name + "/group"
			}
			t.Run(sname, func(t *testing.T) {
				ctx := context.Background()
				topic := "t" + sname
				opts := []pubsub.SubscribeOption{pubsub.MaxDeliveries(1)}
				if group {
					opts = append(opts, pubsub.Group("g"))
				}
				sub, err := ps.Subscribe(ctx, topic, func(ctx context.Context, e pubsub.Event) error {
					e.Data[0] = 'Z'
					e.Metadata["k"] = "changed by the handler"
					e.Metadata["added"] = "by the handler"
					return errors.New("fail")
				}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe(ctx)
				got := make(chan pubsub.Event, 1)
				dsub, err := ps.Subscribe(ctx, pubsub.DeadLetterTopic(topic), func(ctx context.Context, e pubsub.Event) error {
					got <- e
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				defer dsub.Unsubscribe(ctx)
				if err := ps.Publish(ctx, topic, pubsub.Event{Type: "x", Data: []byte(`"abc"`), Metadata: map[string]string{"k": "v"}}); err != nil {
					t.Fatal(err)
				}
				select {
				case d := <-got:
					if string(d.Data) != `"abc"` || d.Metadata["k"] != "v" || d.Metadata["added"] != "" {
						t.Errorf("dead letter has Data %s, Metadata k=%q added=%q; the event published had Data \"abc\", k=v", d.Data, d.Metadata["k"], d.Metadata["added"])
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no dead letter")
				}
			})
		}
	}
}
