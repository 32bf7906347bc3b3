package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// Each test here is one point a newcomer or an operator tripped over
// (issue 14).

// TestUsageErrorsSayDoubleDash: bad input exits 2 with one line naming the
// flag as the help writes it (--workers, not -workers), an empty TOPIC or
// --keyspace is rejected, and a URL that is not a Redis URL says what one
// looks like.
func TestUsageErrorsSayDoubleDash(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"publish empty topic", []string{"publish", "", "--type", "x", "--redis", "redis://127.0.0.1:1"}, "TOPIC is empty"},
		{"tail empty topic", []string{"tail", "", "--redis", "redis://127.0.0.1:1"}, "TOPIC is empty"},
		{"bad workers value", []string{"demo", "--workers", "many"}, `invalid value "many" for flag --workers`},
		{"unknown flag", []string{"demo", "--wrokers", "3"}, "flag provided but not defined: --wrokers"},
		{"missing value", []string{"tail", "orders", "--redis"}, "flag needs an argument: --redis"},
		{"bad bool", []string{"demo", "--kill=maybe"}, `invalid boolean value "maybe" for --kill`},
		{"not a url", []string{"leases", "--redis", "notaurl"}, `bad --redis URL "notaurl": want redis://[:password@]host:port[/db]`},
		{"not a url demo", []string{"demo", "--redis", "localhost:6379"}, `want redis://`},
		{"empty keyspace leases", []string{"leases", "--keyspace", "", "--redis", "redis://127.0.0.1:1"}, "--keyspace is empty"},
		{"empty keyspace tail", []string{"tail", "orders", "--keyspace=", "--redis", "redis://127.0.0.1:1"}, "--keyspace is empty"},
		{"empty keyspace publish", []string{"publish", "orders", "--type", "t", "--keyspace", "", "--redis", "redis://127.0.0.1:1"}, "--keyspace is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := leasebus(t, 20*time.Second, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit code %d, want %d (stderr %q)", r.code, exitUsage, r.stderr)
			}
			if n := strings.Count(r.stderr, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", n, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, tc.want)
			}
			if regexp.MustCompile(`(^|[ :])-[a-z]`).MatchString(strings.ReplaceAll(r.stderr, "leasebus ", "")) {
				t.Errorf("stderr %q names a flag with one dash", r.stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	r := leasebus(t, 10*time.Second, "--version")
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`^leasebus \S+( [0-9a-f]{12})? \(go1\.\d+\S* \w+/\w+\)\n$`).MatchString(r.stdout) {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want 0 and one line 'leasebus VERSION (goX OS/ARCH)'", r.code, r.stdout, r.stderr)
	}
	if r := leasebus(t, 10*time.Second, "--help"); !strings.Contains(r.stdout, "--version") {
		t.Errorf("--help does not mention --version:\n%s", r.stdout)
	}
}

// TestDemoOneWorker: one worker, one thread, one signal: the demo says it
// skips the kill (nobody could take over) and its counts are singular.
func TestDemoOneWorker(t *testing.T) {
	r := leasebus(t, 60*time.Second, "demo", "--workers", "1", "--threads", "1", "--signals", "1", "--seed", "3")
	if r.code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"leasebus demo: 1 worker, 1 thread, 1 signal per thread,",
		"(--workers 1: no other worker could take a thread over, so the demo skips the kill)",
		"1 worker up (pids w1=",
		"all 1 accepted signal ran;",
		"1 run on 1 thread;",
		"1/1 accepted signal ran",
		"legend: 1 worker w1 running the thread",
		"no worker was killed",
		"PASS: every guarantee held",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, bad := range []string{"1 workers", "1 threads", "1 runs", "1 signals", "SIGKILL w"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("stdout has %q:\n%s", bad, r.stdout)
		}
	}
}

// TestDemoTwelveWorkers: workers 10-12 are drawn as letters a-c, and the
// legend says so.
func TestDemoTwelveWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 12 processes")
	}
	r := leasebus(t, 120*time.Second, "demo", "--workers", "12", "--threads", "3", "--signals", "4", "--seed", "5", "--kill=false")
	if r.code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "legend: 1-9 worker w1-w9, a-c worker w10-w12 running the thread") {
		t.Errorf("legend does not explain workers 10-12:\n%s", r.stdout)
	}
	if !regexp.MustCompile(`12 workers up \(pids w1=\d+ .* w12=\d+\)`).MatchString(r.stdout) {
		t.Errorf("stdout does not list the 12 workers:\n%s", r.stdout)
	}
	// Every mark on a row is a worker mark the legend explains, or one of
	// the other marks.
	for _, m := range regexp.MustCompile(`(?m)^  thread-\d+ \|([^|]*)\|$`).FindAllStringSubmatch(r.stdout, -1) {
		if !regexp.MustCompile(`^[1-9a-c.-]+$`).MatchString(m[1]) {
			t.Errorf("row %q has marks the legend does not explain", m[1])
		}
	}
}

// TestDemoWatchHint: the hint to watch the leases is a command that can be
// copied as printed (no masked password) and never names the embedded
// server, which is gone when the demo ends.
func TestDemoWatchHint(t *testing.T) {
	for _, tc := range []struct {
		flagURL  string
		external bool
		want     string
		not      string
	}{
		{"", false, "the embedded server stops with the demo; to watch the thread leases from another terminal, run the demo on your own Redis: leasebus demo --redis redis://localhost:6379", "--keyspace"},
		{"redis://:s3cret@db:6379/2", true, "leasebus leases --watch --redis redis://:s3cret@db:6379/2 --keyspace ks --prefix signals.thread.", "xxxxx"},
		{"", true, "leasebus leases --watch --keyspace ks --prefix signals.thread.", "--redis"}, // from LEASEBUS_REDIS_URL, which leases reads too
	} {
		got := watchHint(tc.flagURL, tc.external, "ks")
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("watchHint(%q, %v) = %q, want %q and no %q", tc.flagURL, tc.external, got, tc.want, tc.not)
		}
	}
	r := leasebus(t, 60*time.Second, "demo", "--workers", "1", "--threads", "1", "--signals", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "(the embedded server stops with the demo;") || strings.Contains(r.stdout, "leases --watch --redis redis://127.0.0.1") {
		t.Errorf("embedded demo: exit %d, hint wrong:\n%s", r.code, r.stdout)
	}
}

// TestDemoWatchHintCopyable runs the demo on a password-protected
// redis-server and runs the hint's command, as printed, while the demo is
// still going: it must list the demo's thread leases.
func TestDemoWatchHintCopyable(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://:s3cret@" + srv.Addr()
	cmd := exec.CommandContext(ctx, bin, "demo", "--workers", "2", "--threads", "2", "--signals", "8", "--kill=false", "--redis", url)
	cmd.Env = append(os.Environ(), redisEnv+"=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var hint string
	for sc.Scan() {
		if _, h, ok := strings.Cut(sc.Text(), "to watch the thread leases meanwhile: "); ok {
			hint = strings.TrimSuffix(h, ")")
			break
		}
	}
	if !strings.Contains(hint, "--redis "+url+" ") {
		t.Fatalf("hint %q does not carry the URL as given (%s)", hint, url)
	}
	go func() { // drain the rest
		for sc.Scan() {
		}
	}()
	args := strings.Fields(strings.Replace(strings.Replace(hint, "--watch", "", 1), "leasebus", "", 1))
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := leasebus(t, 10*time.Second, args...)
		if r.code != 0 {
			t.Fatalf("the hint's command %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if strings.Contains(r.stdout, "signals.thread.thread-") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hint's command never listed a thread lease; last output %q", r.stdout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDemoInterrupted sends a real SIGINT to a running demo (a child
// process), to it alone and, as Ctrl-C in a terminal does, to its whole
// process group (its workers too): it says "interrupted", exits 130,
// prints no verdict, and its worker processes are gone.
func TestDemoInterrupted(t *testing.T) {
	t.Run("Process", func(t *testing.T) { demoInterrupted(t, false) })
	t.Run("ProcessGroup", func(t *testing.T) { demoInterrupted(t, true) })
}

func demoInterrupted(t *testing.T, group bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--workers", "2", "--threads", "2", "--signals", "40", "--duration", "50s")
	cmd.Env = append(os.Environ(), redisEnv+"=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	var pids []int
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if m := regexp.MustCompile(`up \(pids (.*)\)`).FindStringSubmatch(sc.Text()); m != nil {
			for _, f := range strings.Fields(m[1]) {
				n, _ := strconv.Atoi(f[strings.Index(f, "=")+1:])
				pids = append(pids, n)
			}
			break
		}
	}
	if len(pids) != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no worker pids seen:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	time.Sleep(300 * time.Millisecond) // into the sends and runs
	pid := cmd.Process.Pid
	if group {
		pid = -pid // the demo leads its own process group
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit: %v, want code %d\nstdout:\n%s\nstderr:\n%s", err, exitInterrupted, out.String(), errb.String())
	}
	if got := errb.String(); got != "leasebus demo: interrupted; the workers were stopped\n" {
		t.Errorf("stderr %q, want the one line saying it was interrupted", got)
	}
	for _, bad := range []string{"FAIL", "Verdict", "exited early"} {
		if strings.Contains(out.String(), bad) {
			t.Errorf("stdout has %q:\n%s", bad, out.String())
		}
	}
	if !strings.Contains(out.String(), "interrupted; stopping the workers") {
		t.Errorf("stdout does not say it was interrupted:\n%s", out.String())
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker pid %d still exists after the demo exited (kill 0: %v)", pid, err)
		}
	}
}
