package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
)

// h74StalledCommands are the one-shot commands and the Redis command at
// which the server stops answering (SIGSTOP) after the CLI connected.
var h74StalledCommands = []struct {
	name, trigger string
	args          []string
}{
	{"LeasesScan", "scan", []string{"leases"}},
	{"LeasesState", "evalsha", []string{"leases"}}, // the status of each listed lease
	{"Threads", "scan", []string{"threads"}},
	{"Publish", "xadd", []string{"publish", "o", "--type", "x"}},
	{"TopicsDelete", "exists", []string{"topics", "delete", "o"}},
}

// h74Stall runs leasebus args against a Redis that stops answering when the
// command sends trigger, and returns the run.
func h74Stall(t *testing.T, trigger string, args ...string) bhResult {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	heldThread(t, srv, "t")
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.AcquireLease(context.Background(), "jobs/k", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	return runBlackHoled(t, srv, trigger, 0, 90*time.Second, args...)
}

// TestReviewH74StalledRedisTimeout: an operator at 3 a.m. runs leases,
// threads, publish or topics delete against a Redis that stops answering
// (SIGSTOP) after the command connected. The command must exit 1 with one
// line on stderr naming --timeout, within --timeout (plus 2s to close and
// exit): --help documents the bound, with a default of 10s.
//
// Found by review h74 (2026-11-29): no command had --timeout (exit 2,
// "flag provided but not defined"), and the time to give up was go-redis's:
// 10s for most, 35s for "leases" when Redis stopped as it read the leases'
// statuses (1 of 1 each); nothing documented a bound.
func TestReviewH74StalledRedisTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the default --timeout")
	}
	for _, tc := range h74StalledCommands {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const timeout = 2 * time.Second
			r := h74Stall(t, tc.trigger, append(tc.args, "--timeout", timeout.String())...)
			if r.code != exitFailed || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--timeout") {
				t.Errorf("exit %d, stderr %q; want exit 1 and one line naming --timeout", r.code, r.stderr)
			}
			if r.sincePause > timeout+2*time.Second {
				t.Errorf("leasebus %v exited %v after Redis stopped answering; want within --timeout %v (+2s)", tc.args, r.sincePause.Round(time.Millisecond), timeout)
			}
		})
	}
	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		r := h74Stall(t, "evalsha", "leases")
		if r.code != exitFailed || !strings.Contains(r.stderr, "--timeout 10s") {
			t.Errorf("exit %d, stderr %q; want exit 1 naming --timeout 10s", r.code, r.stderr)
		}
		if r.sincePause > 12*time.Second {
			t.Errorf("leases exited %v after Redis stopped answering; want within the default --timeout 10s (+2s)", r.sincePause.Round(time.Millisecond))
		}
	})
}

// TestReviewH74TimeoutFlag: --timeout is in each command's --help with its
// default, and a value that is not positive is an invalid flag (exit 2,
// one line naming --timeout) refused before connecting.
func TestReviewH74TimeoutFlag(t *testing.T) {
	for _, tc := range h74StalledCommands {
		if tc.name == "LeasesState" {
			continue
		}
		h := leasebus(t, 20*time.Second, append(tc.args, "--help")...)
		if h.code != exitOK || !strings.Contains(h.stdout, "--timeout duration") || !strings.Contains(h.stdout, "(default 10s)") {
			t.Errorf("%v --help: exit %d, stdout %q; want --timeout with its default 10s", tc.args, h.code, h.stdout)
		}
		for _, bad := range []string{"0s", "-1s", "x"} {
			r := leasebus(t, 20*time.Second, append(tc.args, "--timeout", bad, "--redis", "redis://127.0.0.1:1")...)
			if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--timeout") || strings.Contains(r.stderr, "reach") {
				t.Errorf("%v --timeout %s: exit %d, stderr %q; want exit 2, one line naming --timeout, before connecting", tc.args, bad, r.code, r.stderr)
			}
		}
	}
}
