package redisstreams

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine is left running after the
// tests: every test closes the clients, backends and servers it starts (with
// t.Cleanup), so nothing is ignored here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
