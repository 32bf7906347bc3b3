package signals

import (
	"testing"
	"time"
)

// TestInboxExpiry pins the figures the package doc ("What a thread leaves
// behind") and TestKilledOwnerLeavesNoInbox give for inboxExpiry.
func TestInboxExpiry(t *testing.T) {
	for _, tc := range []struct {
		ttl, linger, want time.Duration
	}{
		{DefaultLeaseTTL, DefaultLinger, 41550 * time.Millisecond},
		{2 * time.Second, 3 * time.Second, 13 * time.Second},
		{2 * time.Second, time.Millisecond, 5800 * time.Millisecond}, // the first wait: TTL/4 + 100ms
	} {
		if got := inboxExpiry(config{ttl: tc.ttl, linger: tc.linger}); got != tc.want {
			t.Errorf("inboxExpiry(TTL %v, linger %v) = %v, want %v", tc.ttl, tc.linger, got, tc.want)
		}
	}
}
