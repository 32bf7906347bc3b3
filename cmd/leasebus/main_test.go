package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// bin is the leasebus binary the tests run: this test binary itself,
// which TestMain turns into the command when asCLI is set (it is, for every
// process the tests start: they inherit this process's environment). So
// the command runs as built by go test, with the race detector when the
// tests have it, and no second build of the module is needed (a go build
// here took about 70s of a cold CI run, on its critical path).
var bin string

// asCLI, set to "1" in the environment, makes this test binary run main.
const asCLI = "LEASEBUS_CMD_TEST_AS_CLI"

func TestMain(m *testing.M) {
	// The command's own arguments never start with -test. (go test passes
	// those): with them, asCLI leaked from elsewhere, and this is a test run.
	if os.Getenv(asCLI) == "1" && (len(os.Args) < 2 || !strings.HasPrefix(os.Args[1], "-test.")) {
		main() // exits
	}
	exe, err := os.Executable()
	if err != nil {
		panic("own executable: " + err.Error())
	}
	bin = exe
	if err := os.Setenv(asCLI, "1"); err != nil {
		panic(err)
	}
	// A binary built with -race sleeps 1s as it exits (the race
	// runtime's atexit_sleep_ms), which a user's build does not: without
	// this, every command the tests time would take 1s longer (tail's
	// exit after Ctrl-C: 2.003s instead of 1.002s).
	if err := os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// leasebus runs the binary with args and env LEASEBUS_REDIS_URL unset.
func leasebus(t *testing.T, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), redisEnv+"=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run leasebus %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("leasebus %v did not finish within %v\nstdout:\n%s\nstderr:\n%s", args, timeout, r.stdout, r.stderr)
	}
	return r
}

func TestUsageErrorsAreOneLineExit2(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage"},
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"leases", "--bogus"}, "flag provided but not defined: --bogus"},
		{"bad duration", []string{"demo", "--duration", "soon"}, "invalid value"},
		{"zero workers", []string{"demo", "--workers", "0"}, "--workers 0"},
		{"bad fault", []string{"demo", "--break", "everything"}, "--break"},
		{"publish without topic", []string{"publish", "--type", "t"}, "want one TOPIC"},
		{"publish without type", []string{"publish", "orders", "--redis", "redis://127.0.0.1:1"}, "--type is required"},
		{"publish bad json", []string{"publish", "orders", "--type", "t", "--data", "{bad", "--redis", "redis://127.0.0.1:1"}, "not valid JSON"},
		{"tail bad from", []string{"tail", "orders", "--from", "middle", "--redis", "redis://127.0.0.1:1"}, "--from must be"},
		{"tail without redis", []string{"tail", "orders"}, "no Redis server"},
		{"bad redis url", []string{"leases", "--redis", "foo://x"}, "bad --redis URL"},
		{"unreachable redis", []string{"leases", "--redis", "redis://127.0.0.1:1"}, "cannot reach Redis"},
		{"unreachable redis tail", []string{"tail", "orders", "--redis", "redis://127.0.0.1:1"}, "cannot reach Redis"},
		{"unreachable redis demo", []string{"demo", "--redis", "redis://127.0.0.1:1"}, "cannot reach Redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := leasebus(t, 20*time.Second, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit code %d, want %d (stderr %q)", r.code, exitUsage, r.stderr)
			}
			if tc.want == "Usage" {
				if !strings.Contains(r.stderr, "Usage") {
					t.Errorf("stderr %q, want the usage", r.stderr)
				}
				return
			}
			if n := strings.Count(r.stderr, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", n, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.want)
			}
			if d := time.Since(start); d > connectTimeout+3*time.Second {
				t.Errorf("took %v, want it bounded by the connect timeout %v", d, connectTimeout)
			}
		})
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"demo", "--help"}, {"leases", "-h"}, {"tail", "--help"}, {"publish", "--help"}, {"help", "tail"}} {
		r := leasebus(t, 10*time.Second, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage") || r.stderr != "" {
			t.Errorf("leasebus %v: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", args, r.code, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "--break") {
			t.Errorf("leasebus %v: help shows the hidden --break flag", args)
		}
	}
}

// TestDemo runs the demo at small size, on the embedded server and on a
// redis-server: exit 0 and a passing verdict, with the kill and the
// takeover, stopping as soon as every signal ran.
func TestDemo(t *testing.T) {
	check := func(t *testing.T, args ...string) {
		args = append([]string{"demo", "--workers", "3", "--threads", "2", "--signals", "3", "--seed", "7", "--duration", "40s"}, args...)
		start := time.Now()
		r := leasebus(t, 90*time.Second, args...)
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{"SIGKILL", "took over", "accepted signals ran; stopping the workers", "Timeline",
			"Verdict", "ok    takeover after the kill  thread-", "PASS: every guarantee held"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
			}
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the demo took %v; it should stop soon after the takeover (lease TTL 2s)", d)
		}
	}
	t.Run("Embedded", func(t *testing.T) { check(t) })
	t.Run("RedisServer", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		check(t, "--redis", srv.URL())
		// The demo deletes its keys from a server it was given.
		if n := srv.Client(t).DBSize(context.Background()).Val(); n != 0 {
			t.Errorf("%d keys left on the server after the demo", n)
		}
	})
}

// TestDemoBrokenGuaranteeExits1 injects a run without the lease: the
// verdict must fail and the exit code be 1.
func TestDemoBrokenGuaranteeExits1(t *testing.T) {
	r := leasebus(t, 90*time.Second, "demo", "--workers", "2", "--threads", "2", "--signals", "3", "--kill=false", "--break=double-run", "--duration", "30s")
	if r.code != exitFailed {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitFailed, r.stdout, r.stderr)
	}
	for _, want := range []string{"FAIL  one owner at a time", "FAIL: a guarantee broke"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestPublishTailLeases runs publish, tail and leases against a real
// redis-server.
func TestPublishTailLeases(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	url := srv.URL()

	r := leasebus(t, 10*time.Second, "publish", "orders", "--type", "order.created", "--data", `{"id": 1}`, "--metadata", "src=test", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "published ") {
		t.Fatalf("publish: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	id := strings.Fields(r.stdout)[1]

	// tail from earliest sees the stored event; then a live one.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "tail", "orders", "--from", "earliest", "--count", "2", "--redis", url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("tail printed nothing; stderr %q", errb.String())
	}
	first := lines.Text()
	for _, want := range []string{id, "order.created", `{"id":1}`, "src=test"} {
		if !strings.Contains(first, want) {
			t.Errorf("tail line %q lacks %q", first, want)
		}
	}
	r = leasebus(t, 10*time.Second, "publish", "orders", "--type", "order.paid", "--redis", url)
	if r.code != 0 {
		t.Fatalf("second publish: exit %d, stderr %q", r.code, r.stderr)
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), "order.paid") {
		t.Errorf("tail second line %q, want order.paid", lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("tail: %v; stderr %q", err, errb.String())
	}

	// leases: none, then one held through the client.
	r = leasebus(t, 10*time.Second, "leases", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "no live leases") {
		t.Errorf("leases: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	b, err := connect(context.Background(), url, redisOptions(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.AcquireLease(context.Background(), "jobs/42", "worker-7", time.Minute); err != nil {
		t.Fatal(err)
	}
	r = leasebus(t, 10*time.Second, "leases", "--prefix", "jobs/", "--redis", url)
	if r.code != 0 || !strings.Contains(r.stdout, "jobs/42") || !strings.Contains(r.stdout, "worker-7") || !strings.Contains(r.stdout, "TIME LEFT") {
		t.Errorf("leases: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
