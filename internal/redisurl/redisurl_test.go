package redisurl

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://localhost:6379/0":             "redis://localhost:6379/0",
		"redis://":                             "redis://",
		"redis://:s3cret@localhost:6379/0":     "redis://:xxxxx@localhost:6379/0",
		"redis://user:s3cret@localhost:6379":   "redis://user:xxxxx@localhost:6379",
		"redis://:ab/s3cret@localhost:6379/0":  "redis://:xxxxx@localhost:6379/0",
		"redis://user:s3cret@localhost:port/0": "redis://user:xxxxx@localhost:port/0",
		"redis://s3cret%zz@localhost:6379":     "redis://xxxxx@localhost:6379",
		"rediss://u:p@ss/w@rd@host:1/2":        "rediss://u:xxxxx@ss/w@rd@host:1/2", // parses: host ss, as go-redis reads it
		"not a url":                            "not a url",
		"unix:///tmp/redis.sock":               "unix:///tmp/redis.sock",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestRedactIn(t *testing.T) {
	raw := "redis://:ab/s3cret@localhost:6379/0"
	msg := `parse "redis://:ab/s3cret@localhost:6379/0": invalid port ":ab" after host; ab/s3cret`
	got := RedactIn(msg, raw)
	if strings.Contains(got, "s3cret") {
		t.Errorf("RedactIn left the password: %q", got)
	}
	if !strings.Contains(got, "invalid port") {
		t.Errorf("RedactIn dropped the message: %q", got)
	}
}
