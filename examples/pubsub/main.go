// Command pubsub shows leasebus events: fan-out subscriptions that each get
// every event, a consumer group whose members share the events, and a
// handler that fails once so the event is redelivered with DeliveryAttempt 2.
//
// Without --redis it runs on the in-process backend (inmem); with --redis
// the same code runs on Redis Streams (redisstreams), under a fresh key
// prefix that it deletes when done.
//
// Run it with:
//
//	go run ./examples/pubsub
//	go run ./examples/pubsub --redis redis://localhost:6379
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/inmem"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
)

func main() {
	os.Exit(program(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// program parses the flags, picks the backend and runs the example. It
// returns the exit code: 0 (also for --help), 1 when the example failed, 2
// for bad flags or a Redis URL that does not work.
func program(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pubsub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("redis", "", "Redis `URL` such as redis://localhost:6379 (default: the in-process backend)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pubsub example: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var bus pubsub.PubSub
	if *url == "" {
		bus = inmem.New()
		fmt.Fprintln(stdout, "on the in-process backend (inmem)")
	} else {
		var rnd [4]byte
		_, _ = rand.Read(rnd[:])
		prefix := "leasebus-example-" + hex.EncodeToString(rnd[:]) // a fresh keyspace per run
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		b, err := redisstreams.NewURL(cctx, *url, redisstreams.Options{Prefix: prefix})
		cancel()
		if err != nil {
			fmt.Fprintln(stderr, "pubsub example: --redis:", err)
			return 2
		}
		defer deleteKeys(*url, prefix) // after Close, which closes b's client
		bus = b
		fmt.Fprintf(stdout, "on Redis Streams (redisstreams), keys under %s\n", prefix)
	}
	defer bus.Close()
	if err := run(ctx, bus, stdout); err != nil {
		fmt.Fprintln(stderr, "pubsub example:", err)
		return 1
	}
	return 0
}

// deleteKeys deletes the example's keys, so that it leaves nothing behind on
// your Redis.
func deleteKeys(url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for it := c.Scan(ctx, 0, prefix+":*", 100).Iterator(); it.Next(ctx); {
		c.Del(ctx, it.Val())
	}
}

// tally counts what each subscriber saw; it is safe for concurrent use.
type tally struct {
	mu   sync.Mutex
	seen map[string][]string // subscriber -> "type#order(attempt)"
	n    int
	all  chan struct{} // closed when n reaches want
	want int
}

func (t *tally) add(who string, e pubsub.Event) {
	var body struct {
		Order int `json:"order"`
	}
	_ = json.Unmarshal(e.Data, &body)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[who] = append(t.seen[who], fmt.Sprintf("%s#%d(attempt %d)", e.Type, body.Order, e.DeliveryAttempt))
	t.n++
	if t.n == t.want {
		close(t.all)
	}
}

// The subscribers, with what kind of subscription each is.
var subscribers = []struct{ name, kind string }{
	{"audit", "fan-out"},
	{"mailer", "fan-out"},
	{"billing", "group billing, 2 members"},
	{"shipping", "group shipping, nacks once"},
}

// run subscribes, publishes three orders and prints what each subscriber
// got, once every delivery arrived.
func run(ctx context.Context, bus pubsub.PubSub, w io.Writer) error {
	const orders = 3
	// 2 fan-out subscribers x 3 + a group x 3 + the retry subscriber's 3 + 1 redelivery.
	t := &tally{seen: map[string][]string{}, all: make(chan struct{}), want: 2*orders + orders + orders + 1}

	// Fan-out: without a Group option every subscription gets every event.
	for _, who := range []string{"audit", "mailer"} {
		sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
			t.add(who, e)
			return nil
		})
		if err != nil {
			return err
		}
		defer sub.Unsubscribe(ctx)
	}

	// Competing consumers: the two members of group "billing" share the
	// events; each event goes to exactly one of them.
	for range 2 {
		sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
			t.add("billing", e) // counted together: which member got it varies
			return nil
		}, pubsub.Group("billing"))
		if err != nil {
			return err
		}
		defer sub.Unsubscribe(ctx)
	}

	// At-least-once: returning an error nacks the delivery, and the event
	// comes back with DeliveryAttempt counted up.
	failed := false
	sub, err := bus.Subscribe(ctx, "orders", func(_ context.Context, e pubsub.Event) error {
		t.add("shipping", e)
		if e.DeliveryAttempt == 1 && !failed && string(e.Data) == `{"order":2}` {
			failed = true
			return errors.New("card service unavailable")
		}
		return nil
	}, pubsub.Group("shipping"))
	if err != nil {
		return err
	}
	defer sub.Unsubscribe(ctx)

	for i := 1; i <= orders; i++ {
		data, _ := json.Marshal(map[string]int{"order": i})
		if err := bus.Publish(ctx, "orders", pubsub.Event{Type: "order.created", Data: data}); err != nil {
			return err
		}
	}
	select {
	case <-t.all:
	case <-time.After(10 * time.Second):
		return errors.New("timed out waiting for deliveries")
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range subscribers {
		got := t.seen[s.name]
		if s.name == "billing" || s.name == "shipping" {
			slices.Sort(got) // members and redeliveries interleave
		}
		fmt.Fprintf(w, "%-39s %v\n", fmt.Sprintf("%s (%s):", s.name, s.kind), got)
	}
	return nil
}
