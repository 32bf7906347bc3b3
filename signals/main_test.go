package signals_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(pacedWorkerEnv) != "" {
		// A worker process of BenchmarkForwardedAtHalfRateProcesses: it
		// runs no test, and exits when its stdin closes.
		os.Exit(pacedWorkerMain())
	}
	if os.Getenv(workerEnv) != "" {
		// A worker process re-executed by the multi-process tests: no leak
		// check, it is killed or exits on its own.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
