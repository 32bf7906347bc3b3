package pubsub_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

func TestApplyOptionsDefaults(t *testing.T) {
	c, err := pubsub.ApplyOptions()
	if err != nil {
		t.Fatalf("ApplyOptions(): %v", err)
	}
	if c.Group != "" || c.StartFrom != pubsub.Latest || c.Concurrency != pubsub.DefaultConcurrency ||
		c.AckDeadline != pubsub.DefaultAckDeadline || c.MaxDeliveries != pubsub.DefaultMaxDeliveries {
		t.Errorf("defaults %+v, want fan-out from Latest, concurrency %d, ack deadline %v, max deliveries %d",
			c, pubsub.DefaultConcurrency, pubsub.DefaultAckDeadline, pubsub.DefaultMaxDeliveries)
	}
}

func TestApplyOptionsSetsEachField(t *testing.T) {
	c, err := pubsub.ApplyOptions(
		pubsub.Group("workers"),
		pubsub.StartFrom(pubsub.Earliest),
		pubsub.Concurrency(8),
		pubsub.AckDeadline(5*time.Second),
		pubsub.MaxDeliveries(3),
	)
	if err != nil {
		t.Fatalf("ApplyOptions: %v", err)
	}
	if c.Group != "workers" || c.StartFrom != pubsub.Earliest || c.Concurrency != 8 ||
		c.AckDeadline != 5*time.Second || c.MaxDeliveries != 3 {
		t.Errorf("got %+v", c)
	}
	// The last of two settings wins.
	c, err = pubsub.ApplyOptions(pubsub.Concurrency(2), pubsub.Concurrency(5), pubsub.MaxDeliveries(0))
	if err != nil || c.Concurrency != 5 || c.MaxDeliveries != 0 {
		t.Errorf("got %+v, %v; want concurrency 5, max deliveries 0", c, err)
	}
}

func TestApplyOptionsRejectsBadInput(t *testing.T) {
	cases := []struct {
		name  string
		opts  []pubsub.SubscribeOption
		field string
	}{
		{"EmptyGroup", []pubsub.SubscribeOption{pubsub.Group("")}, "group"},
		{"UnknownPosition", []pubsub.SubscribeOption{pubsub.StartFrom(pubsub.Position(2))}, "start"},
		{"NegativePosition", []pubsub.SubscribeOption{pubsub.StartFrom(pubsub.Position(-1))}, "start"},
		{"ConcurrencyZero", []pubsub.SubscribeOption{pubsub.Concurrency(0)}, "concurrency 0"},
		{"ConcurrencyNegative", []pubsub.SubscribeOption{pubsub.Concurrency(-3)}, "concurrency -3"},
		{"AckDeadlineZero", []pubsub.SubscribeOption{pubsub.AckDeadline(0)}, "ack deadline 0s"},
		{"AckDeadlineNegative", []pubsub.SubscribeOption{pubsub.AckDeadline(-time.Second)}, "ack deadline -1s"},
		{"ConcurrencyTooLarge", []pubsub.SubscribeOption{pubsub.Concurrency(pubsub.MaxConcurrency + 1)}, "concurrency 65537"},
		{"ConcurrencyHuge", []pubsub.SubscribeOption{pubsub.Concurrency(1 << 40)}, "concurrency 1099511627776"},
		{"AckDeadlineOneNanosecond", []pubsub.SubscribeOption{pubsub.AckDeadline(time.Nanosecond)}, "ack deadline 1ns"},
		{"AckDeadlineBelowMillisecond", []pubsub.SubscribeOption{pubsub.AckDeadline(999 * time.Microsecond)}, "ack deadline 999µs"},
		{"RedeliveryDelayNegative", []pubsub.SubscribeOption{pubsub.RedeliveryDelay(-time.Millisecond)}, "redelivery delay -1ms"},
		{"MaxDeliveriesNegative", []pubsub.SubscribeOption{pubsub.MaxDeliveries(-1)}, "max deliveries -1"},
		{"RedeliveryCapZero", []pubsub.SubscribeOption{pubsub.RedeliveryCap(0)}, "redelivery cap 0s"},
		{"ReadOnDemandFanOut", []pubsub.SubscribeOption{pubsub.ReadOnDemand()}, "read on demand"},
		{"ExpireWhenDrainedZero", []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.ExpireWhenDrained(0)}, "expire-when-drained ttl 0s"},
		{"ExpireWhenDrainedNegative", []pubsub.SubscribeOption{pubsub.Group("g"), pubsub.ExpireWhenDrained(-time.Second)}, "expire-when-drained ttl -1s"},
		{"ExpireWhenDrainedFanOut", []pubsub.SubscribeOption{pubsub.ExpireWhenDrained(time.Minute)}, "expire when drained"},
		{"NilOption", []pubsub.SubscribeOption{pubsub.Concurrency(1), nil}, "option 1"},
		{"FirstErrorWins", []pubsub.SubscribeOption{pubsub.Concurrency(0), pubsub.MaxDeliveries(-1)}, "concurrency"},
		{"ErrorNotHiddenByLaterValidValue", []pubsub.SubscribeOption{pubsub.Concurrency(0), pubsub.Concurrency(2)}, "concurrency 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := pubsub.ApplyOptions(tc.opts...)
			if !errors.Is(err, pubsub.ErrInvalid) {
				t.Fatalf("got %+v, %v; want an error wrapping ErrInvalid", c, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
			if c != (pubsub.SubscribeConfig{}) {
				t.Errorf("got config %+v with the error, want the zero config", c)
			}
		})
	}
}

func TestApplyOptionsAcceptsBounds(t *testing.T) {
	c, err := pubsub.ApplyOptions(pubsub.Concurrency(pubsub.MaxConcurrency), pubsub.AckDeadline(pubsub.MinAckDeadline))
	if err != nil || c.Concurrency != pubsub.MaxConcurrency || c.AckDeadline != pubsub.MinAckDeadline {
		t.Fatalf("got %+v, %v; want the bounds accepted", c, err)
	}
}

func TestPositionString(t *testing.T) {
	for p, want := range map[pubsub.Position]string{
		pubsub.Latest:       "latest",
		pubsub.Earliest:     "earliest",
		pubsub.Position(9):  "Position(9)",
		pubsub.Position(-1): "Position(-1)",
	} {
		if got := p.String(); got != want {
			t.Errorf("Position(%d).String() = %q, want %q", int(p), got, want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	cases := []struct {
		attempt int
		want    time.Duration
	}{
		{-1, 10 * time.Millisecond},
		{0, 10 * time.Millisecond},
		{1, 10 * time.Millisecond},
		{2, 20 * time.Millisecond},
		{3, 40 * time.Millisecond},
		{7, 640 * time.Millisecond},
		{8, time.Second},
		{9, time.Second},
		{1 << 20, time.Second},
	}
	for _, tc := range cases {
		if got := pubsub.RetryDelay(tc.attempt); got != tc.want {
			t.Errorf("RetryDelay(%d) = %v, want %v", tc.attempt, got, tc.want)
		}
	}
	prev := time.Duration(0)
	for a := 1; a < 100; a++ {
		d := pubsub.RetryDelay(a)
		if d < prev || d > time.Second {
			t.Fatalf("RetryDelay(%d) = %v after %v: want non-decreasing and at most 1s", a, d, prev)
		}
		prev = d
	}
}
