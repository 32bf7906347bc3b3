// Package redisurl hides the password of a Redis URL in what leasebus
// prints: errors and log lines.
//
// Redact works on any string, also one net/url cannot parse (a password
// with a character that needs escaping, a mistyped port): those are
// exactly the URLs an error is about.
package redisurl

import (
	"net/url"
	"strings"
)

// hidden replaces a password.
const hidden = "xxxxx"

// Redact returns raw with its password replaced by "xxxxx". A URL that
// net/url parses is written as url.URL.Redacted does (one without a
// password is returned as given: Redacted would write "redis://" as
// "redis:"). In one it cannot parse, everything between "://" and the last
// "@" is the user information: its part after the first ":" (the whole of
// it when it has no ":", which go-redis may take for a password) is
// replaced.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if u.User == nil {
			return raw
		}
		if _, ok := u.User.Password(); !ok && u.User.Username() == "" {
			return raw
		}
		return u.Redacted()
	}
	start := strings.Index(raw, "://")
	if start < 0 {
		return raw
	}
	start += len("://")
	at := strings.LastIndex(raw, "@")
	if at < start {
		return raw
	}
	info := raw[start:at]
	if user, _, ok := strings.Cut(info, ":"); ok {
		return raw[:start] + user + ":" + hidden + raw[at:]
	}
	return raw[:start] + hidden + raw[at:]
}

// RedactIn returns msg with every copy of raw, and of raw's password if it
// can tell it, replaced as Redact does: for errors that quote the URL,
// such as url.Parse's and go-redis's.
func RedactIn(msg, raw string) string {
	red := Redact(raw)
	if red == raw {
		return msg
	}
	msg = strings.ReplaceAll(msg, raw, red)
	if pw := password(raw); len(pw) >= 3 {
		msg = strings.ReplaceAll(msg, pw, hidden)
	}
	return msg
}

// password returns the password of raw as Redact finds it, or "".
func password(raw string) string {
	start := strings.Index(raw, "://")
	at := strings.LastIndex(raw, "@")
	if start < 0 || at < start+3 {
		return ""
	}
	info := raw[start+3 : at]
	if _, pw, ok := strings.Cut(info, ":"); ok {
		return pw
	}
	return info
}
