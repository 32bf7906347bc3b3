package main

import (
	"strings"
	"testing"
	"time"
)

// TestReviewH74RevokeStalledTimeout: "leases revoke" against a Redis that
// stops answering (SIGSTOP) must exit 1 with one line naming --timeout,
// within --timeout (plus 2s), as leases, threads, publish and topics delete
// do (TestReviewH74StalledRedisTimeout). Stalled as it reads the lease's
// state (ReadingState), it says nothing of the revoke, which was not sent;
// stalled at the revoke itself (Revoking, matched by its reason), it says
// the revoke was sent and may still run, on that tenure only.
//
// Found by review h74 (2026-11-29): revoke has no --timeout (exit 2, "flag
// provided but not defined"); without it, it gave up after go-redis's 10s
// (1 of 1).
func TestReviewH74RevokeStalledTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	const reason = "zz-revoke-reason"
	for _, tc := range []struct {
		name, trigger string
		sent          bool
	}{{"ReadingState", "evalsha", false}, {"Revoking", reason, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := h74Stall(t, tc.trigger, "leases", "revoke", "jobs/k", "--reason", reason, "--timeout", timeout.String())
			if r.code != exitFailed || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--timeout") {
				t.Errorf("exit %d, stderr %q; want exit 1 and one line naming --timeout", r.code, r.stderr)
			}
			if got := strings.Contains(r.stderr, "was sent and may still run"); got != tc.sent {
				t.Errorf("stderr %q; says the revoke was sent: %v, want %v", r.stderr, got, tc.sent)
			}
			if r.sincePause > timeout+2*time.Second {
				t.Errorf("leases revoke exited %v after Redis stopped answering; want within --timeout %v (+2s)", r.sincePause.Round(time.Millisecond), timeout)
			}
		})
	}
}
