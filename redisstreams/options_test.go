package redisstreams

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/pubsub"
)

func TestNewRejectsBadOptions(t *testing.T) {
	// New does not contact Redis, so an address nobody listens on will do.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	tests := []struct {
		name  string
		o     Options
		field string
	}{
		{"MaxLen below -1", Options{MaxLen: -2}, "MaxLen"},
		{"negative StreamIdleTTL", Options{StreamIdleTTL: -time.Second}, "StreamIdleTTL"},
		{"negative MaxEventSize", Options{MaxEventSize: -1}, "MaxEventSize"},
		{"BlockTime below 1ms", Options{BlockTime: time.Microsecond}, "BlockTime"},
		{"negative BatchSize", Options{BatchSize: -1}, "BatchSize"},
		{"MaxLen huge", Options{MaxLen: 1 << 40}, "MaxLen 1099511627776"},
		{"Retention below -1", Options{Retention: -2}, "Retention -2"},
		{"StreamIdleTTL 1ns", Options{StreamIdleTTL: time.Nanosecond}, "StreamIdleTTL 1ns"},
		{"BlockTime 1ns", Options{BlockTime: time.Nanosecond}, "BlockTime 1ns"},
		{"BlockTime huge", Options{BlockTime: time.Duration(1<<63 - 1)}, "BlockTime 2562047h"},
		{"BatchSize huge", Options{BatchSize: 1 << 40}, "BatchSize 1099511627776"},
		{"LeaseSyncReplicas negative", Options{LeaseSyncReplicas: -1}, "LeaseSyncReplicas -1"},
		{"LeaseSyncTimeout 1ns", Options{LeaseSyncTimeout: time.Nanosecond}, "LeaseSyncTimeout 1ns"},
		{"LeaseSyncTimeout negative", Options{LeaseSyncTimeout: -time.Second}, "LeaseSyncTimeout -1s"},
		{"prefix with a brace", Options{Prefix: "a{b}"}, "Prefix"},
		{"prefix with a glob", Options{Prefix: "a*"}, "Prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(c, tc.o)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New(%+v) = %v, %v; want an error wrapping ErrInvalid", tc.o, b, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field %s", err, tc.field)
			}
		})
	}
	t.Run("nil client", func(t *testing.T) {
		if _, err := New(nil, Options{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "client") {
			t.Fatalf("New(nil) = %v; want ErrInvalid naming the client", err)
		}
	})
	t.Run("zero value is valid", func(t *testing.T) {
		b, err := New(c, Options{})
		if err != nil {
			t.Fatalf("New with zero Options: %v", err)
		}
		if b.opts.Retention != pubsub.DefaultRetention || b.opts.MaxLen != DefaultMaxLen || b.opts.BatchSize != DefaultBatchSize || b.opts.Prefix != DefaultPrefix {
			t.Errorf("defaults not applied: %+v", b.opts)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// TestMaxLenIsRetention: the deprecated MaxLen still configures Retention
// when Retention is not set, and Retention wins when both are.
func TestMaxLenIsRetention(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		o    Options
		want int
	}{
		{Options{MaxLen: 10}, 10},
		{Options{MaxLen: -1}, pubsub.RetainAll},
		{Options{MaxLen: 10, Retention: 20}, 20},
		{Options{Retention: 1}, 1},
	} {
		b, err := New(c, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		if b.opts.Retention != tc.want {
			t.Errorf("New(%+v): Retention %d, want %d", tc.o, b.opts.Retention, tc.want)
		}
		_ = b.Close()
	}
}
