package inmem

import (
	"context"
	"errors"
	"testing"

	"github.com/leasebus/leasebus/pubsub"
)

// TestReview57PublishBatchAfterCloseIsErrClosed: "calls after Close return
// ErrClosed" (pubsub/doc.go, Errors; pubsub.go: "after the first call, calls
// of every other method return ErrClosed"). inmem's PublishBatch of an
// empty batch after Close returns nil, as if the Backend were open
// (redisstreams checks closed first and returns ErrClosed), and one with
// an invalid publication returns ErrInvalid where every other inmem method
// reports the Close first.
func TestReview57PublishBatchAfterCloseIsErrClosed(t *testing.T) {
	b := New()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ps   []pubsub.Publication
	}{
		{"nil", nil},
		{"empty", []pubsub.Publication{}},
		{"invalid", []pubsub.Publication{{Topic: "", Event: pubsub.Event{Type: "x"}}}},
	} {
		if err := b.PublishBatch(ctx, tc.ps); !errors.Is(err, pubsub.ErrClosed) {
			t.Errorf("PublishBatch(%s batch) after Close = %v, want ErrClosed", tc.name, err)
		}
	}
}
