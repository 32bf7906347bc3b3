package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestReviewH67PublishFailureNamesTheEvent: README: "Handlers must be
// idempotent (use Event.ID)". When "leasebus publish" fails after it sent
// the event (Redis stops answering as the XADD is on its way), the event may
// have been stored: the operator's only safe retry is one with the same
// event id, so the error must say that it may have been stored and give the
// id the command made up (--id), not leave a retry to publish a second event
// under a new random id.
//
// Found by review h67 (2026-11-29): `leasebus publish: publish to "o":
// redisstreams: xadd "leasebus:{o}": i/o timeout` (3 of 3): no id, and no
// word that the event may be stored.
func TestReviewH67PublishFailureNamesTheEvent(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	r := runBlackHoled(t, srv, "xadd", 0, 60*time.Second, "publish", "o", "--type", "t")
	if r.code != exitFailed || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("exit %d, stderr %q; want exit 1 and one line", r.code, r.stderr)
	}
	if !regexp.MustCompile(`--id [0-9a-f]{8}-[0-9a-f]{4}-`).MatchString(r.stderr) || !strings.Contains(r.stderr, "may have been stored") {
		t.Errorf("stderr %q; want it to say the event may have been stored and to give its id (--id ...) for a retry", r.stderr)
	}
}

// TestReviewH67PublishOneLine: tail and the listings print every id and name
// on one line, quoted when it holds a control character (review h54); the
// line publish prints must too, or a script reading "published ID to TOPIC"
// reads two lines.
//
// Found by review h67 (2026-11-29): "published x\ny to o" (3 of 3).
func TestReviewH67PublishOneLine(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	r := leasebus(t, 20*time.Second, "publish", "o\tp", "--type", "t", "--id", "x\ny", "--redis", srv.URL())
	if r.code != exitOK || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, `"x\ny"`) {
		t.Errorf("publish: exit %d, stdout %q, stderr %q; want one line with the id quoted", r.code, r.stdout, r.stderr)
	}
}
