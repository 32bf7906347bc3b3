package signals

import (
	"testing"
	"time"
)

// TestInboxExpiry pins the figures the package doc ("What a thread leaves
// behind") and TestKilledOwnerLeavesNoInbox give for inboxExpiry.
func TestInboxExpiry(t *testing.T) {
	zero := time.Duration(0)
	for _, tc := range []struct {
		ttl, linger, want time.Duration
		floor             *time.Duration
	}{
		{DefaultLeaseTTL, DefaultLinger, 10 * time.Minute, nil},
		{5 * time.Minute, DefaultLinger, 10*time.Minute + 3*(75*time.Second+100*time.Millisecond), nil},
		{DefaultLeaseTTL, DefaultLinger, 41550 * time.Millisecond, &zero},
		{2 * time.Second, 3 * time.Second, 13 * time.Second, &zero},
		{2 * time.Second, time.Millisecond, 5800 * time.Millisecond, &zero}, // the first wait: TTL/4 + 100ms
	} {
		c := config{ttl: tc.ttl, linger: tc.linger}
		c.hooks.expiryFloor = tc.floor
		if got := inboxExpiry(c); got != tc.want {
			t.Errorf("inboxExpiry(TTL %v, linger %v, floor %v) = %v, want %v", tc.ttl, tc.linger, tc.floor, got, tc.want)
		}
	}
}
