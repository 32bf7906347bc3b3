//go:build linux

package redistest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr makes the child die with the test binary, so a test binary
// killed by a timeout does not leave redis-server processes behind.
// (Linux delivers the signal when the forking OS thread exits; the Go runtime
// only retires a thread when a goroutine exits while locked to it with
// runtime.LockOSThread, which tests should not do around Start.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopState polls /proc until the process state is stopped ('T') when
// stopped is true, or anything else when it is false. It gives up silently
// after timeout or if /proc cannot be read: the signal has been sent anyway.
func waitStopState(pid int, stopped bool, timeout time.Duration) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// Format: pid (comm) state ...; comm may contain spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return
		}
		isStopped := b[i+2] == 'T' || b[i+2] == 't'
		if isStopped == stopped || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
