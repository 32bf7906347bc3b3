package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
)

// asMain, set to "1" in the environment, makes the test binary run main
// (TestMain), so that a test can send the program a real SIGINT.
const asMain = "SIGNALS_EXAMPLE_TEST_AS_MAIN"

// TestReviewH74CtrlCCleansUp: Ctrl-C while the example runs on your Redis
// (--redis). deleteKeys is there "so that the example leaves nothing
// behind on your Redis", and README has users run it on their own server.
// A SIGINT (sent to the parent, as to all the processes of the group by a
// terminal) must stop the example promptly, with exit code 130, and leave
// no key behind.
//
// Found by review h74 (2026-11-29): the program died at once on the SIGINT
// (no handler) and its deferred deleteKeys never ran: 12 to 18 keys left
// under leasebus-example-<hex> (fence keys, done records, the handback
// stream), 2 of 2 by hand; here, the same.
func TestReviewH74CtrlCCleansUp(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cmd := exec.Command(os.Args[0], "--redis", srv.URL())
	cmd.Env = append(os.Environ(), asMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, as a shell job
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	// Ctrl-C once a signal ran: the children hold leases then.
	sc := bufio.NewScanner(out)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "  ran  ") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	var code int
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait(); close(exited) }()
	// The terminal sends SIGINT to the whole foreground group.
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waitErr:
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after the SIGINT; output so far %q, stderr %q", seen, errb.String())
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d, stderr %q, keys left %q", code, errb.String(), keys)
	if code != 130 || len(keys) != 0 {
		t.Errorf("after Ctrl-C: exit %d, %d keys left on the server (%q); want exit 130 and none", code, len(keys), keys)
	}
}
