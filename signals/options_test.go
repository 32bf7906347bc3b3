package signals_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/signals"
)

// TestOptionsRejectSpinAndOverflow: option values that would make the
// runtime spin (intervals of nanoseconds) or overflow (huge TTLs, windows,
// concurrency) are rejected by New with ErrInvalid naming the option and
// the value.
func TestOptionsRejectSpinAndOverflow(t *testing.T) {
	b := newBackend(t)
	agent := newRecorder().agent
	cases := []struct {
		name string
		opt  signals.Option
		want string
	}{
		{"RenewInterval1ns", signals.WithRenewInterval(time.Nanosecond), "WithRenewInterval: renew interval 1ns"},
		{"RenewIntervalZero", signals.WithRenewInterval(0), "WithRenewInterval: renew interval 0s"},
		{"RenewIntervalNegative", signals.WithRenewInterval(-time.Second), "WithRenewInterval: renew interval -1s"},
		{"RecoveryInterval1ns", signals.WithRecoveryInterval(time.Nanosecond), "WithRecoveryInterval: recovery interval 1ns"},
		{"RecoveryIntervalZero", signals.WithRecoveryInterval(0), "WithRecoveryInterval: recovery interval 0s"},
		{"LeaseTTLTooShort", signals.WithLeaseTTL(time.Millisecond), "WithLeaseTTL: lease ttl 1ms"},
		{"LeaseTTLHuge", signals.WithLeaseTTL(time.Duration(1<<63 - 1)), "WithLeaseTTL: lease ttl 2562047h47m16.854775807s"},
		{"LingerZero", signals.WithLinger(0), "WithLinger: linger 0s"},
		{"NextWaitNegative", signals.WithNextWait(-time.Millisecond), "WithNextWait: next wait -1ms"},
		{"DedupeWindowShort", signals.WithDedupeWindow(time.Millisecond), "WithDedupeWindow: dedupe window 1ms"},
		{"DedupeWindowHuge", signals.WithDedupeWindow(time.Duration(1<<63 - 1)), "WithDedupeWindow: dedupe window 2562047h"},
		{"WorkConcurrencyZero", signals.WithWorkConcurrency(0), "WithWorkConcurrency: work concurrency 0"},
		{"WorkConcurrencyHuge", signals.WithWorkConcurrency(pubsub.MaxConcurrency + 1), "WithWorkConcurrency: work concurrency 65537"},
		{"LoggerNil", signals.WithLogger(nil), "WithLogger: logger is nil"},
		{"ProcessIDEmpty", signals.WithProcessID(""), "WithProcessID: process id is empty"},
		{"ObserverNil", signals.WithObserver(nil), "WithObserver: observer is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := signals.New(b, agent, tc.opt)
			if err == nil {
				_ = rt.Close(t.Context())
				t.Fatalf("New accepted the option, want an error naming %q", tc.want)
			}
			if !errors.Is(err, signals.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

// TestOptionsAcceptBounds: the documented bounds themselves are accepted.
func TestOptionsAcceptBounds(t *testing.T) {
	b := newBackend(t)
	newRuntime(t, b, newRecorder().agent,
		signals.WithLeaseTTL(signals.MaxLeaseTTL), signals.WithRenewInterval(signals.MinInterval),
		signals.WithRecoveryInterval(signals.MinInterval), signals.WithDedupeWindow(signals.MaxDedupeWindow),
		signals.WithWorkConcurrency(4))
}
