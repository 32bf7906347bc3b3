package redisstreams

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		if b.opts.MaxLen != DefaultMaxLen || b.opts.BatchSize != DefaultBatchSize || b.opts.Prefix != DefaultPrefix {
			t.Errorf("defaults not applied: %+v", b.opts)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}
