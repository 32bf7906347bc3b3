package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasebus/leasebus/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// want is the output after the line naming the backend.
const want = `audit (fan-out):                        [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
mailer (fan-out):                       [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
billing (group billing, 2 members):     [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
shipping (group shipping, nacks once):  [order.created#1(attempt 1) order.created#2(attempt 1) order.created#2(attempt 2) order.created#3(attempt 1)]
`

// check runs the program with args and compares its output.
func check(t *testing.T, firstLine string, args ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := program(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	head, rest, _ := strings.Cut(out.String(), "\n")
	if !strings.HasPrefix(head, firstLine) {
		t.Errorf("first line %q, want it to start with %q", head, firstLine)
	}
	if rest != want {
		t.Errorf("output:\n%s\nwant:\n%s", rest, want)
	}
}

func TestRun(t *testing.T) {
	check(t, "on the in-process backend (inmem)")
}

// TestRedisFlag: --redis is honoured: the example runs on Redis Streams,
// with the same output, and leaves no key behind.
func TestRedisFlag(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	check(t, "on Redis Streams (redisstreams), keys under leasebus-example-", "--redis", srv.URL())
	if n := srv.Client(t).DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("%d keys left on the server", n)
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // on stderr
	}{
		{[]string{"--help"}, 0, "-redis URL"},
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--redis", "notaurl"}, 2, "notaurl"},
		{[]string{"--redis", "redis://127.0.0.1:1"}, 2, "connection refused"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		if code := program(context.Background(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
