package leasebusotel_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	leasebusotel "github.com/leasebus/leasebus/otel"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// slowRelease delays the first release script of one lease key by d,
// closing entered when it starts: the owner's tenure is then ending (it
// stopped reading its inbox) and holds the lease for d more.
type slowRelease struct {
	key, sha string
	d        time.Duration
	entered  chan struct{}
	once     sync.Once
}

func (h *slowRelease) match(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 {
		return false
	}
	name, _ := a[0].(string)
	body, _ := a[1].(string)
	if !(strings.EqualFold(name, "evalsha") && body == h.sha) && !(strings.EqualFold(name, "eval") && strings.Contains(body, "release.lua")) {
		return false
	}
	for _, x := range a[2:] {
		if s, ok := x.(string); ok && strings.Contains(s, h.key) {
			return true
		}
	}
	return false
}

func (h *slowRelease) hold() {
	first := false
	h.once.Do(func() { first = true; close(h.entered) })
	if first {
		time.Sleep(h.d)
	}
}

func (h *slowRelease) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowRelease) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) {
			h.hold()
		}
		return next(ctx, cmd)
	}
}
func (h *slowRelease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.match(c) {
				h.hold()
				break
			}
		}
		return next(ctx, cmds)
	}
}

// noWorkGroupRS: a redisstreams backend whose runtime takes no wake notice
// from the work group (as noWorkGroup in signals/watch_followers_test.go):
// the other runtime's handlers get every notice.
type noWorkGroupRS struct{ *redisstreams.Backend }

type idleSub struct{ topic string }

func (s idleSub) Topic() string                     { return s.topic }
func (s idleSub) Unsubscribe(context.Context) error { return nil }

func (n noWorkGroupRS) Subscribe(ctx context.Context, topic string, h pubsub.Handler, opts ...pubsub.SubscribeOption) (pubsub.Subscription, error) {
	if cfg, err := pubsub.ApplyOptions(opts...); err == nil && topic == signals.WorkTopic && cfg.Group != "" {
		return idleSub{topic}, nil
	}
	return n.Backend.Subscribe(ctx, topic, h, opts...)
}

// TestWrapEndingTenureSlowRelease: TestFollowerReleaseAfterWatchLeft
// (signals/watch_end_test.go), plain and through the otel wrapper. A's
// tenure of the thread ends and its release takes 600ms (a slow server);
// B sends in that moment (Forwarded) and B's handler gets the notice. The
// signals doc promises the signal runs without waiting for a recovery
// interval however long the release takes, because the released tenure
// looks at its inbox once more. Found by review 12 of 2026-11-23: the
// wrapper passes on neither pubsub.DrainedDeleter nor pubsub.BacklogReader,
// and signals looked only at the wrapper, so the signal waited for the
// recovery interval (not run within 10s); signals now finds them through
// Unwrap (pubsub.As).
func TestWrapEndingTenureSlowRelease(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		name := "plain"
		if wrap {
			name = "otel"
		}
		t.Run(name, func(t *testing.T) {
			redistest.Require(t)
			srv := redistest.Start(t, redistest.Options{})
			src, err := os.ReadFile("../redisstreams/lua/release.lua")
			if err != nil {
				t.Fatal(err)
			}
			sum := sha1.Sum(src)
			const thread = "slowrel"
			hook := &slowRelease{key: signals.LeaseKey(thread), sha: hex.EncodeToString(sum[:]), d: 600 * time.Millisecond, entered: make(chan struct{})}
			ba, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ba.Close() })
			ba.Client().AddHook(hook)
			bb, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = bb.Close() })
			in, err := leasebusotel.New(leasebusotel.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var psA, psB pubsub.PubSub = noWorkGroupRS{ba}, bb
			if wrap {
				psA, psB = in.Wrap(psA), in.Wrap(psB)
			}
			got := make(chan string, 16)
			agent := func(ctx context.Context, run *signals.Run) error {
				for _, s := range run.Signals {
					got <- s.ID
				}
				for {
					s, ok := run.Next(ctx)
					if !ok {
						return nil
					}
					got <- s.ID
				}
			}
			mk := func(ps pubsub.PubSub, id string) *signals.Runtime {
				rt, err := signals.New(ps, agent, signals.WithProcessID(id), signals.WithLeaseTTL(2*time.Minute),
					signals.WithRecoveryInterval(time.Minute), signals.WithLinger(20*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = rt.Close(ctx)
				})
				return rt
			}
			a := mk(psA, "A")
			b := mk(psB, "B")
			if acc, err := a.Send(t.Context(), thread, signals.Signal{ID: "first", Type: "m"}); err != nil || acc.Action != signals.Woke {
				t.Fatalf("first: %+v %v", acc, err)
			}
			select {
			case id := <-got:
				if id != "first" {
					t.Fatalf("got %s", id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("first did not run")
			}
			select {
			case <-hook.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("A's release did not come")
			}
			sent := time.Now()
			acc, err := b.Send(t.Context(), thread, signals.Signal{ID: "second", Type: "m"})
			if err != nil || acc.Action != signals.Forwarded {
				t.Fatalf("second: %+v %v; want Forwarded", acc, err)
			}
			select {
			case id := <-got:
				t.Logf("%s ran %v after its Send", id, time.Since(sent).Round(time.Millisecond))
			case <-time.After(10 * time.Second):
				t.Fatalf("signal sent to an ending tenure (release 600ms) did not run within 10s of its Send (recovery interval 1m)")
			}
		})
	}
}
