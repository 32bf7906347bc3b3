//go:build !unix

package signals_test

// benchProcCPU returns 0: this platform's CPU time is not read.
func benchProcCPU() float64 { return 0 }
