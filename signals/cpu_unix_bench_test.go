//go:build unix

package signals_test

import "syscall"

// benchProcCPU returns the CPU time (user + system, seconds) this process
// has used so far, or 0 when it cannot tell.
func benchProcCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
