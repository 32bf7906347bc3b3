package redisstreams

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestReviewH74NewURLNegativeDB: a URL naming a negative database
// ("redis://host:6379/-1", "?db=-2": a typo, or "/$DB" with DB=-1) parses
// with go-redis, which then never sends SELECT (only for a DB above 0): the
// Backend quietly works on database 0, a database the URL did not name. NewURL
// must refuse it with an error wrapping ErrInvalid that names the database,
// before dialing.
//
// Found by review h74 (2026-11-29): accepted; "leasebus leases --redis
// redis://127.0.0.1:PORT/-1" listed database 0's leases (1 of 1).
func TestReviewH74NewURLNegativeDB(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:1/-1", "redis://127.0.0.1:1?db=-2", "unix:///tmp/nonexistent.sock?db=-3"} {
		b, err := NewURL(context.Background(), u, Options{})
		if err == nil {
			_ = b.Close()
			t.Fatalf("NewURL(%q) = nil error", u)
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "database") {
			t.Errorf("NewURL(%q) = %v; want ErrInvalid naming the database", u, err)
		}
	}
}

// TestReviewH74NewURLRefusesSentinel: NewURL given a Sentinel's address
// (the address an operator of a Sentinel deployment knows) must refuse it
// with an error wrapping ErrInvalid that names Sentinel, as it refuses a
// Cluster node: a Sentinel holds no data, and every call would fail with
// "ERR unknown command".
//
// Found by review h74 (2026-11-29): NewURL returned a Backend; its first
// call failed with "ERR unknown command 'xadd'" (1 of 1).
func TestReviewH74NewURLRefusesSentinel(t *testing.T) {
	st := redistest.StartSentinel(t, 0)
	b, err := NewURL(context.Background(), "redis://"+st.SentinelAddrs()[0], Options{})
	if err == nil {
		_ = b.Close()
		t.Fatal("NewURL(a Sentinel's address) = nil error; want ErrInvalid naming Sentinel")
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Sentinel") {
		t.Errorf("NewURL(a Sentinel's address) = %v; want ErrInvalid naming Sentinel", err)
	}
}
