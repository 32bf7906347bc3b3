package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestReviewH74ThreadsCancelQuotesThread: the command prints names it read
// or was given through cell, quoted when they hold control characters, so
// that a name cannot forge or break lines of the output (tail, leases and
// threads do). "threads cancel" printed THREAD as given: a name with a
// newline (a thread id from user input) split its one-line answer in two.
//
// Found by review h74 (2026-11-29): "no run to cancel: no process holds
// thread a" and "b" on two lines (1 of 1).
func TestReviewH74ThreadsCancelQuotesThread(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	r := leasebus(t, 20*time.Second, "threads", "cancel", "a\nb", "--redis", srv.URL())
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `"a\nb"`) {
		t.Errorf("threads cancel 'a<newline>b': exit %d, stdout %q, stderr %q; want exit 0 and one line naming the thread quoted", r.code, r.stdout, r.stderr)
	}
}
