package loadtest_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/signals"
	"github.com/leasebus/leasebus/signals/internal/sigtest"
)

// startRedis starts a redis-server for the test (it skips without one,
// unless LEASEBUS_REQUIRE_REDIS=1) and returns it with a client.
func startRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	return srv, srv.Client(t)
}

// urlRuntime is sigtest.URLRuntime.
func urlRuntime(t *testing.T, url, prefix, id string, agent signals.Agent, hook redis.Hook, opts ...signals.Option) (*signals.Runtime, func()) {
	t.Helper()
	return sigtest.URLRuntime(t, url, prefix, id, agent, hook, opts...)
}
