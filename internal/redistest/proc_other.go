//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: only Linux can tie the child's life to ours.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopState is a no-op where /proc is unavailable.
func waitStopState(pid int, stopped bool, timeout time.Duration) {}
