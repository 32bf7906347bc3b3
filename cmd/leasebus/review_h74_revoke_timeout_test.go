package main

import (
	"strings"
	"testing"
	"time"
)

// TestReviewH74RevokeStalledTimeout: "leases revoke" against a Redis that
// stops answering (SIGSTOP) as it reads the lease's state must exit 1 with
// one line naming --timeout, within --timeout (plus 2s), as leases,
// threads, publish and topics delete do (TestReviewH74StalledRedisTimeout).
//
// Found by review h74 (2026-11-29): revoke has no --timeout (exit 2, "flag
// provided but not defined"); without it, it gave up after go-redis's 10s
// (1 of 1). Not fixed here: cmd/leasebus/revoke.go is the lead's (the
// token-conditioned revoke); fs.timeoutFlag, checkTimeout and bounded
// (redis.go) are what the other commands use.
func TestReviewH74RevokeStalledTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	r := h74Stall(t, "evalsha", "leases", "revoke", "jobs/k", "--reason", "r", "--timeout", timeout.String())
	if r.code != exitFailed || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--timeout") {
		t.Errorf("exit %d, stderr %q; want exit 1 and one line naming --timeout", r.code, r.stderr)
	}
	if r.sincePause > timeout+2*time.Second {
		t.Errorf("leases revoke exited %v after Redis stopped answering; want within --timeout %v (+2s)", r.sincePause.Round(time.Millisecond), timeout)
	}
}
