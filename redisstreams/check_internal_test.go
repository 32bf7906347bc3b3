package redisstreams

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
)

// TestEncodedBoundCoversEncoding: encodedBound, which lets CheckEvent skip
// encoding an event that cannot reach MaxEventSize, is never below the size
// encodeEvent gives, also for metadata that JSON escapes the most (control
// characters, <, >, &, U+2028) and for an empty ID (PrepareEvent makes
// one) and CreatedAt (a timestamp is added).
func TestEncodedBoundCoversEncoding(t *testing.T) {
	worst := strings.Repeat("\x01<>&\u2028\"\\", 50)
	for _, e := range []pubsub.Event{
		{Type: "t"},
		{ID: "x", Type: "t", RunID: "r", Data: []byte("data")},
		{ID: "x", Type: "t", Metadata: map[string]string{worst: worst, "": "", "a": worst}},
		{ID: worst, Type: worst, Metadata: map[string]string{"k": "v"}, CreatedAt: time.Unix(0, -1<<62)},
	} {
		p, err := pubsub.PrepareEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		_, size, err := encodeEvent(p)
		if err != nil {
			t.Fatal(err)
		}
		if b := encodedBound(e); b < size {
			t.Errorf("encodedBound %d below the encoded size %d of %+v", b, size, e)
		}
	}
}

// TestCheckEvent: CheckEvent refuses what Publish refuses, with the same
// words, and takes what it takes, on both sides of MaxEventSize.
func TestCheckEvent(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	b := psBackend(t, c, Options{MaxEventSize: 1000})
	for _, tc := range []struct {
		name  string
		topic string
		e     pubsub.Event
		ok    bool
	}{
		{"Small", "t", pubsub.Event{Type: "t", Data: make([]byte, 100)}, true},
		{"JustUnder", "t", pubsub.Event{ID: "x", Type: "t", Data: make([]byte, 900)}, true},
		{"EscapedMetadataUnder", "t", pubsub.Event{ID: "x", Type: "t", Metadata: map[string]string{"k": strings.Repeat("<", 150)}}, true},
		{"Over", "t", pubsub.Event{Type: "t", Data: make([]byte, 1000)}, false},
		{"EscapedMetadataOver", "t", pubsub.Event{ID: "x", Type: "t", Metadata: map[string]string{"k": strings.Repeat("<", 200)}}, false},
		{"NoType", "t", pubsub.Event{ID: "x"}, false},
		{"EmptyTopic", "", pubsub.Event{Type: "t"}, false},
		{"BadMetadata", "t", pubsub.Event{Type: "t", Metadata: map[string]string{"k": "\xff"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr := b.CheckEvent(tc.topic, tc.e)
			perr := b.Publish(t.Context(), tc.topic, tc.e)
			if tc.ok != (cerr == nil) || tc.ok != (perr == nil) {
				t.Fatalf("CheckEvent: %v; Publish: %v; want both ok=%t", cerr, perr, tc.ok)
			}
			if !tc.ok && (!errors.Is(cerr, pubsub.ErrInvalid) || !strings.Contains(cerr.Error(), strings.SplitN(perr.Error(), ":", 2)[0])) {
				t.Fatalf("CheckEvent: %v; Publish: %v; want ErrInvalid with Publish's words", cerr, perr)
			}
		})
	}
}
