package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestMain lets the test binary stand in for the program: the parent under
// test re-executes os.Executable(), this binary, with "child" arguments.
func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		if err := os.Unsetenv(asMain); err != nil { // not for its children
			panic(err)
		}
		main() // exits
	}
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for concurrent writes: the children's
// stderr are copied into it by one goroutine each.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// check runs the program with args and checks the exit code and output.
func check(t *testing.T, args ...string) {
	t.Helper()
	var out bytes.Buffer
	var errb syncBuffer
	if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"p1  send a1  woke ",
		"p2  send b1  woke ",
		"forwarded  to p1, run ",
		"thread-a: a1 a2 a3 a4 a5  each ran once, in the order sent\n",
		"thread-b: b1 b2 b3  each ran once, in the order sent\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %q:\n%s", want, got)
		}
	}
	// Every signal ran once: one "ran" line each, with a token.
	if n := len(regexp.MustCompile(`(?m)^p[123]  ran  [ab]\d  on thread-[ab]    run \w+, token \d+$`).FindAllString(got, -1)); n != 8 {
		t.Errorf("%d ran lines, want 8:\n%s", n, got)
	}
	if errb.String() != "" {
		t.Errorf("stderr: %s", errb.String())
	}
}

func TestEmbedded(t *testing.T) {
	check(t)
}

func TestRedisServer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	check(t, "--redis", srv.URL())
}

func TestBadFlagExits1(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--bogus"}, nil, &out, &errb); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "bogus") {
		t.Errorf("stderr %q, want it to name the flag", errb.String())
	}
}

func TestHelpExits0(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{arg}, nil, &out, &errb); code != 0 {
			t.Errorf("%s: exit code %d, want 0 (stderr %q)", arg, code, errb.String())
		}
		if !strings.Contains(errb.String(), "-redis URL") {
			t.Errorf("%s: stderr %q, want the usage", arg, errb.String())
		}
	}
}
