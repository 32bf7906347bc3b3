package redisstreams

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
)

// pipelineNames records the command names of every pipeline a client sends.
type pipelineNames struct {
	mu  sync.Mutex
	got [][]string
}

func (h *pipelineNames) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = strings.ToLower(c.Name())
		}
		h.mu.Lock()
		h.got = append(h.got, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestGroupCreateAndXAddAreOneScript: PublishFor and a PublishBatch
// publication with a Group create the group and add the entry in one script
// (publish_for.lua, sent as EVAL), never as a separate XGROUP CREATE, so no
// other client's command (a drained inbox's deletion, say) can run between
// them and leave the entry in a stream without the group; the batch's
// plain publication follows in the same pipeline.
func TestGroupCreateAndXAddAreOneScript(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	h := &pipelineNames{}
	c.AddHook(h)
	b := psBackend(t, c, Options{Retention: pubsub.RetainAll}) // no trim.lua in the pipelines
	ctx := context.Background()
	if err := b.PublishFor(ctx, "inbox", "owner", pubsub.Event{ID: "e1", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishBatch(ctx, []pubsub.Publication{
		{Topic: "inbox", Group: "owner", Event: pubsub.Event{ID: "e2", Type: "t"}},
		{Topic: "work", Event: pubsub.Event{Type: "t"}},
	}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	var got [][]string
	for _, p := range h.got {
		if slices.Contains(p, "xadd") || slices.Contains(p, "eval") || slices.Contains(p, "xgroup") {
			got = append(got, p)
		}
	}
	h.mu.Unlock()
	want := [][]string{{"eval"}, {"eval", "xadd"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("publish pipelines: %v, want %v", got, want)
	}
	// Both entries are the group's.
	n, err := c.XLen(ctx, b.keys.Stream("inbox")).Result()
	if err != nil || n != 2 {
		t.Fatalf("inbox has %d entries (%v), want 2", n, err)
	}
	groups, err := c.XInfoGroups(ctx, b.keys.Stream("inbox")).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != "owner" || groups[0].Lag != 2 {
		t.Errorf("inbox groups %+v (%v), want owner with both entries to read", groups, err)
	}
}
