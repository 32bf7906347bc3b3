package main

import (
	"strings"
	"testing"
	"time"
)

// TestReviewH67DemoLeaseTTLAboveMax: README: "Invalid flags ... give one
// line on stderr and exit code 2". A --lease-ttl the signals runtime refuses
// (above signals.MaxLeaseTTL, 24h) is an invalid flag: the demo must say so
// naming --lease-ttl and exit 2 before it starts a server and workers, not
// start them and exit 1 (the code of a broken guarantee or a failed run)
// with a worker's "WithLeaseTTL" error.
//
// Found by review h67 (2026-11-29): exit 1 after starting 3 workers,
// "leasebus demo: worker w1 exited early (exit status 1): leasebus
// demo-worker: start runtime: signals: invalid argument: WithLeaseTTL:
// lease ttl 25h0m0s is above 24h0m0s (MaxLeaseTTL)" (3 of 3).
func TestReviewH67DemoLeaseTTLAboveMax(t *testing.T) {
	for _, ttl := range []string{"25h", "2562047h"} {
		r := leasebus(t, 60*time.Second, "demo", "--lease-ttl", ttl, "--threads", "1", "--signals", "1")
		t.Logf("--lease-ttl %s: exit %d, stdout %q, stderr %q", ttl, r.code, r.stdout, r.stderr)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--lease-ttl") || r.stdout != "" {
			t.Errorf("demo --lease-ttl %s: exit %d, stdout %q, stderr %q; want exit 2, nothing started, one line naming --lease-ttl", ttl, r.code, r.stdout, r.stderr)
		}
	}
}

// TestReviewH67TopicsDeleteEmptyTopic: an empty TOPIC ("topics delete
// "$TOPIC"" with TOPIC unset) must be named as such, as tail and publish do
// ("TOPIC is empty"), not reported as a wrong count of arguments.
//
// Found by review h67 (2026-11-29): "want one TOPIC argument after delete,
// got 1" (3 of 3): one argument was given, and it was empty.
func TestReviewH67TopicsDeleteEmptyTopic(t *testing.T) {
	r := leasebus(t, 20*time.Second, "topics", "delete", "", "--redis", "redis://127.0.0.1:1")
	if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "TOPIC is empty") {
		t.Errorf("topics delete '': exit %d, stderr %q; want exit 2 and one line saying TOPIC is empty", r.code, r.stderr)
	}
}

// TestReviewH67WatchIntervalTooShort: "--interval 1ms" (a typo for 1s) made
// --watch list the whole keyspace (a SCAN of every key) back to back: thousands
// of rounds a second against the deployment's Redis, at the moment an
// operator watches it because it is in trouble. An interval below 100ms is
// refused, exit 2, naming --interval.
//
// Found by review h67 (2026-11-29): accepted; "leases --watch --interval
// 1ns" printed 89,142 lines in 2s and sent Redis about 35,000 commands; here
// both commands accepted it and went on to connect (3 of 3).
func TestReviewH67WatchIntervalTooShort(t *testing.T) {
	for _, args := range [][]string{
		{"leases", "--watch", "--interval", "1ms"},
		{"threads", "--watch", "--interval", "1ns"},
	} {
		r := leasebus(t, 20*time.Second, append(args, "--redis", "redis://127.0.0.1:1")...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--interval") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming --interval", args, r.code, r.stderr)
		}
	}
}
