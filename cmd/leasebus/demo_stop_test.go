package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasebus/leasebus/internal/redistest"
)

// TestDemoDurationCutShort: "demo --help" says of --duration: "upper bound
// on the run (d); signals not run by then fail the verdict". A demo that
// --duration stops while its workers are still sending must print the
// timeline and a failing verdict (exit 1), never PASS.
//
// Found by review revA (helper 13, 2026-11-27):
//   - since 55863bd a worker stops sending when its stdin closes, and the
//     verdict judged only the signals that were accepted: 3 of 5 such demos
//     printed "PASS: every guarantee held" and exited 0 with about 50 of
//     320 signals sent. The verdict now fails a worker that did not record
//     sending its whole share;
//   - 2 of 4 (and 2 of 5 before 55863bd) ended with "read demo records:
//     ... i/o timeout" and no verdict: the record read ran on the
//     --duration ctx, whose deadline became the socket's, and the read
//     failed before the ctx said it ended. It now reads on the command's
//     ctx.
func TestDemoDurationCutShort(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for i := range 4 {
		r := leasebus(t, 60*time.Second, "demo", "--redis", srv.URL(), "--workers", "2", "--threads", "8",
			"--signals", "40", "--kill=false", "--duration", "2s", "--work", "20ms")
		t.Logf("run %d: exit %d, %q, stderr %q", i+1, r.code, grepLine(r.stdout, "every signal ran"), r.stderr)
		if strings.Contains(r.stderr, "read demo records") {
			t.Errorf("run %d: a demo ended by --duration failed with %q instead of the timeline and verdict", i+1, r.stderr)
		}
		if r.code != exitFailed || !strings.Contains(r.stdout, "stopped after --duration 2s") || strings.Contains(r.stdout, "PASS") {
			t.Errorf("run %d: a demo stopped by --duration 2s with most of its 320 signals unsent exited %d; want 1 and a failing verdict:\n%s", i+1, r.code, r.stdout)
		}
		if !strings.Contains(r.stdout, "did not send all its signals before the demo stopped") {
			t.Errorf("run %d: the verdict does not say which worker did not send its share", i+1)
		}
	}
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestDemoGroupCtrlCOnStoppedRedis: Ctrl-C in a
// terminal signals the whole foreground process group, the workers too
// (exec.Command does not give them a group of their own). Like
// TestDemoCtrlCOnStoppedRedis/MidRun, with the SIGINT sent to the group.
func TestDemoGroupCtrlCOnStoppedRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	p := redistest.NewProxy(t, srv.Addr())
	hit := make(chan struct{})
	p.HoldNext(func(b []byte) bool {
		if strings.Contains(strings.ToLower(string(b)), "demo.step") {
			close(hit)
			return true
		}
		return false
	})
	t.Cleanup(func() { srv.Resume(t) })
	cmd := exec.Command(bin, "demo", "--workers", "2", "--threads", "2", "--signals", "20", "--kill=false", "--redis", "redis://"+p.Addr())
	cmd.Env = append(os.Environ(), redisEnv+"=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-hit:
	case err := <-done:
		t.Fatalf("exited before Redis stopped: %v %q", err, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatal("no demo.step sent within 30s")
	}
	srv.Pause(t)
	time.Sleep(500 * time.Millisecond)
	intAt := time.Now()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(40 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
	}
	d := time.Since(intAt)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	t.Logf("exit %d %v after the group SIGINT\nstdout %q\nstderr %q", code, d.Round(time.Millisecond), out.String(), errb.String())
	if code != exitInterrupted {
		t.Errorf("exit %d; want %d", code, exitInterrupted)
	}
	if bound := demoStopGrace + 2*closeGrace + time.Second; d > bound {
		t.Errorf("exited %v after the group SIGINT; want within %v", d.Round(time.Millisecond), bound)
	}
}

// TestDemoCtrlCOnStoppedRedis: Ctrl-C (SIGINT) on a demo whose Redis has
// stopped answering (SIGSTOP): in the middle of the run (at a worker's Send,
// whose inbox entry carries the signal's type), as the parent records the
// start (the "begin" record, right before it tells the workers "go"), and
// as it records the end (the "stop" record, field "why"). doc.go promises
// exit 130 for an interrupted demo; like every command that runs until
// interrupted, it must also exit promptly: the workers get demoStopGrace to
// stop, the key cleanup and the Backend's close closeGrace each; within
// those plus 1s of the SIGINT. Each now exits 4.0s after it.
//
// Found by review (rev6 and revA, 2026-11-27), each 2 of 2 or more:
//   - MidRun: 24s after the SIGINT (rev6), and here, before the fix, still
//     running 40s after it: stopAll's 15s deadline fired for the first stuck
//     worker only, the second was waited for until it exited, and it kept
//     sending on the stalled server;
//   - AtBegin: 20.5s (revA): the begin record's XADD ran WithoutCancel for
//     up to 5s, and its error return skipped the interrupt path, so the
//     deferred stopAll gave stuck workers the 15s end-of-run grace;
//   - AtTheEnd: 25.5s (revA): after the loop nothing looked at the
//     interrupt: the stop record (5s), stopAll's 15s and the final XRange
//     (10s) ran in full. Each step now ends at the interrupt (addUntil,
//     stopAll watching it, untilDone);
//   - AtKill: 8.5s (revE, 4 of 4): the kill record waited out its 5s;
//   - AtCleanup: 9.5s (revE, 4 of 4): the key cleanup chose its 10s limit
//     before the interrupt came and never looked at it.
func TestDemoCtrlCOnStoppedRedis(t *testing.T) {
	for _, tc := range []struct {
		name, trigger string
		args          []string
		code          int
	}{
		{"MidRun", "demo.step", []string{"--workers", "2", "--threads", "2", "--signals", "20", "--kill=false"}, exitInterrupted},
		{"AtBegin", "begin", []string{"--workers", "2", "--threads", "2", "--signals", "3", "--kill=false"}, exitInterrupted},
		{"AtKill", "killed", []string{"--workers", "3", "--threads", "3", "--signals", "6"}, exitInterrupted},
		{"AtTheEnd", "why", []string{"--workers", "2", "--threads", "2", "--signals", "3", "--kill=false"}, exitInterrupted},
		// After the verdict (PASS) was printed, as it deletes its keys:
		// the demo finished, so it exits 0, promptly.
		{"AtCleanup", "scan", []string{"--workers", "2", "--threads", "2", "--signals", "3", "--kill=false"}, exitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.Options{})
			r := runBlackHoled(t, srv, tc.trigger, 500*time.Millisecond, 40*time.Second, append([]string{"demo"}, tc.args...)...)
			if r.sinceINT == 0 {
				t.Fatalf("exited before the SIGINT (exit %d, stderr %q)", r.code, r.stderr)
			}
			if r.code != tc.code {
				t.Errorf("exit %d, stderr %q; want %d", r.code, r.stderr, tc.code)
			}
			if bound := demoStopGrace + 2*closeGrace + time.Second; r.sinceINT > bound {
				t.Errorf("leasebus demo exited %v after Ctrl-C; want within %v", r.sinceINT.Round(time.Millisecond), bound)
			}
		})
	}
}

// TestDemoDurationEndConsistent: demos whose --duration (3.5s) ends near the
// end of their work, on the embedded server. A demo that says "stopped after
// --duration" must fail its verdict (the help: "signals not run by then
// fail the verdict"), and one that says every accepted signal ran must not
// also say --duration stopped it.
//
// Found by review revE (helper 16, 2026-11-27): 3 of 12 said "stopped after
// --duration 3.5s with 39 of 40 accepted signals run" and then PASS, exit 0
// (the last signal finished while the workers stopped, and the verdict
// counted it); 1 of 12 said both (the loop ended on "finished", and the
// --duration ctx had ended meanwhile).
func TestDemoDurationEndConsistent(t *testing.T) {
	for i := range 6 {
		r := leasebus(t, 60*time.Second, "demo", "--workers", "3", "--threads", "4", "--signals", "10", "--duration", "3500ms")
		fin := strings.Contains(r.stdout, "accepted signals ran; stopping the workers")
		cut := strings.Contains(r.stdout, "stopped after --duration")
		t.Logf("run %d: exit %d, finished %v, cut %v", i+1, r.code, fin, cut)
		if cut && (r.code != exitFailed || strings.Contains(r.stdout, "PASS")) {
			t.Errorf("run %d: the demo said --duration stopped it, and exited %d:\n%s", i+1, r.code, r.stdout)
		}
		if fin && cut {
			t.Errorf("run %d: the demo said both that every signal ran and that --duration stopped it:\n%s", i+1, r.stdout)
		}
		if fin && r.code != exitOK {
			t.Errorf("run %d: a demo that finished exited %d:\n%s", i+1, r.code, r.stdout)
		}
	}
}
