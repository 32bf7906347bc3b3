package signals_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// TestReview59ThreadIDAnyBytes sends to threads whose ids hold bytes that
// are not UTF-8 (DESIGN: user-given names, thread ids included, may hold any
// bytes), a signal whose ID is not UTF-8 and one whose Metadata is not, on redisstreams through a
// NewURL client. Each Send must either run its signal or fail with an error
// wrapping signals.ErrInvalid that names the field (Send's doc: bad input
// returns an error wrapping ErrInvalid).
func TestReview59ThreadIDAnyBytes(t *testing.T) {
	srv, _ := startRedis(t)
	ctx := context.Background()
	b, err := redisstreams.NewURL(ctx, srv.URL(), redisstreams.Options{Prefix: "r59"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	got := make(chan string, 16)
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			got <- run.Thread + "|" + s.ID
		}
		for {
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			got <- run.Thread + "|" + s.ID
		}
	}
	rt := newRuntime(t, b, agent)
	for _, tc := range []struct {
		name, thread, id string
		md               map[string]string
	}{
		{"thread not UTF-8", "t\xff\xfe", "s1", nil},
		{"thread NUL and braces", "t\x00{x}:y", "s2", nil},
		{"signal ID not UTF-8", "t-ok", "s\xff3", nil},
		{"signal metadata not UTF-8", "t-ok2", "s4", map[string]string{"k": "v\xff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Send(ctx, tc.thread, signals.Signal{ID: tc.id, Type: "msg", Metadata: tc.md})
			if err != nil {
				if !errors.Is(err, signals.ErrInvalid) {
					t.Fatalf("Send(%q, id %q): %v; want it run, or an error wrapping signals.ErrInvalid", tc.thread, tc.id, err)
				}
				return
			}
			select {
			case g := <-got:
				if g != tc.thread+"|"+tc.id {
					t.Fatalf("ran %q, want %q", g, tc.thread+"|"+tc.id)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("signal %q of thread %q accepted and not run within 10s", tc.id, tc.thread)
			}
		})
	}
}
