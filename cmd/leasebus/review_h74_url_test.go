package main

import (
	"strings"
	"testing"
	"time"
)

// TestReviewH74NegativeDatabase: --redis redis://host:port/-1 names no
// database Redis has; the command must refuse it as a bad --redis URL
// (exit 2, one line) rather than list database 0 as if it were the one named.
//
// Found by review h74 (2026-11-29): "leases --redis redis://127.0.0.1:PORT/-1"
// listed database 0's leases, exit 0 (1 of 1).
func TestReviewH74NegativeDatabase(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:1/-1", "redis://127.0.0.1:1?db=-2"} {
		r := leasebus(t, 20*time.Second, "leases", "--redis", u)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "bad --redis URL") || !strings.Contains(r.stderr, "database") {
			t.Errorf("leases --redis %s: exit %d, stderr %q; want exit 2, one line: bad --redis URL naming the database", u, r.code, r.stderr)
		}
	}
}
