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

// TestGroupCreateAndXAddAreOneTransaction: PublishFor and a PublishBatch
// publication with a Group send the XGROUP CREATE and the XADD inside one
// MULTI/EXEC, so no other client's command (a drained inbox's deletion,
// say) can run between them and leave the entry in a stream without the
// group.
func TestGroupCreateAndXAddAreOneTransaction(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	h := &pipelineNames{}
	c.AddHook(h)
	b := psBackend(t, c, Options{})
	ctx := context.Background()
	if err := b.PublishFor(ctx, "inbox", "owner", pubsub.Event{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishBatch(ctx, []pubsub.Publication{
		{Topic: "inbox", Group: "owner", Event: pubsub.Event{Type: "t"}},
		{Topic: "work", Event: pubsub.Event{Type: "t"}},
	}); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	want := [][]string{{"multi", "xgroup", "xadd", "exec"}, {"multi", "xgroup", "xadd", "xadd", "exec"}}
	var got [][]string
	for _, p := range h.got {
		if slices.Contains(p, "xadd") {
			got = append(got, p)
		}
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("pipelines with an XADD: %v, want %v", got, want)
	}
}
