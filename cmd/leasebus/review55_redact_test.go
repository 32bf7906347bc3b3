package main

import (
	"strings"
	"testing"
)

// TestReview55BadRedisURLHidesPassword: redact "hides the password of a
// Redis URL", but returns the URL as given when net/url cannot parse it,
// which is exactly when checkRedisURL reports a bad --redis URL: a
// password with a character that must be escaped ('/', common in generated
// base64 passwords), or a mistyped port, puts the password on stderr.
func TestReview55BadRedisURLHidesPassword(t *testing.T) {
	for _, u := range []string{
		"redis://:ab/s3cret@localhost:6379/0",
		"redis://user:s3cret@localhost:port/0",
	} {
		err := checkRedisURL(u)
		if err == nil {
			t.Fatalf("checkRedisURL(%q) = nil", u)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("checkRedisURL(%q) shows the password: %v", u, err)
		}
	}
}
