package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestReviewH74SentinelURL: at 3 a.m. the operator of a Sentinel
// deployment passes the address they know, a Sentinel's
// (redis://sentinel:26379). README: "--redis names one server" and a URL
// the command cannot use is an invalid flag, exit 2. Each command must
// refuse it with one line that names Sentinel (and what to give instead),
// exit 2: a Sentinel holds no data.
//
// Found by review h74 (2026-11-29): every command connected and failed with
// the Sentinel's "ERR unknown command 'scan'" ('xadd', 'evalsha', ...),
// exit 1 (1 of 1 each).
func TestReviewH74SentinelURL(t *testing.T) {
	st := redistest.StartSentinel(t, 0)
	u := "redis://" + st.SentinelAddrs()[0]
	for _, args := range [][]string{
		{"leases"},
		{"threads"},
		{"publish", "o", "--type", "x"},
		{"topics", "delete", "o"},
		{"leases", "revoke", "k", "--reason", "r"},
		{"threads", "cancel", "t"},
		{"tail", "o", "--count", "1"},
	} {
		r := leasebus(t, 30*time.Second, append(args, "--redis", u)...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "Sentinel") || strings.Contains(r.stderr, "unknown command") {
			t.Errorf("%v --redis <a Sentinel>: exit %d, stderr %q; want exit 2, one line naming Sentinel", args, r.code, r.stderr)
		}
	}
	// A redis+sentinel:// URL (go-redis's FailoverOptions have none; other
	// clients use this form) is refused naming Sentinel too.
	r := leasebus(t, 20*time.Second, "leases", "--redis", "redis+sentinel://"+st.SentinelAddrs()[0]+"/"+st.MasterName())
	if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "Sentinel") {
		t.Errorf("leases --redis redis+sentinel://...: exit %d, stderr %q; want exit 2, one line naming Sentinel", r.code, r.stderr)
	}
}
