package redisstreams

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestReview55NewURLHidesPasswordOfUnparsableURL: NewURL's parse error now
// goes through redactURL ("password hidden", TestNewURLRefusesClusterNode),
// but redactURL returns the URL as given when net/url cannot parse it, and
// that is the only case where this error is built: the error also wraps
// go-redis's parse error, which quotes the whole URL. A password with a
// character that must be escaped in a URL ('/', common in generated
// base64 passwords) makes the URL unparsable, and the error then carries
// the password, twice.
func TestReview55NewURLHidesPasswordOfUnparsableURL(t *testing.T) {
	for _, u := range []string{
		"redis://:ab/s3cret@localhost:6379/0",
		"redis://user:s3cret@localhost:port/0",
	} {
		b, err := NewURL(context.Background(), u, Options{})
		if err == nil {
			_ = b.Close()
			t.Fatalf("NewURL(%q) = nil error", u)
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("NewURL(%q) = %v; want ErrInvalid", u, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("NewURL(%q) error shows the password: %v", u, err)
		}
	}
}
