package redistest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a test failure when set to "1".
const RequireEnv = "LEASEBUS_REQUIRE_REDIS"

// ReadyTimeout bounds every wait in this package: a server answering PING,
// a process exiting after a signal, a cluster reaching cluster_state:ok.
const ReadyTimeout = 10 * time.Second

// pollInterval is how often the bounded wait loops poll.
const pollInterval = 20 * time.Millisecond

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Require skips t when redis-server is not on PATH. When the environment
// variable LEASEBUS_REQUIRE_REDIS is "1" it fails t with t.Fatal instead, so
// that CI never skips real-Redis tests silently.
func Require(t testing.TB) {
	t.Helper()
	requireBinary(t, "redis-server")
}

// requireBinary applies the Require policy to any binary name.
func requireBinary(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("redistest: %s not found on PATH and %s=1: install Redis (e.g. apt-get install redis-server) or unset %s to skip",
			name, RequireEnv, RequireEnv)
		return
	}
	t.Skipf("redistest: %s not found on PATH; skipping (set %s=1 to fail instead)", name, RequireEnv)
}
