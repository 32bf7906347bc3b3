package loadtest_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/signals"
	"github.com/leasebus/leasebus/signals/internal/sigtest"
)

// startRedis is sigtest.StartRedis.
func startRedis(t *testing.T) (*redistest.Server, *redis.Client) { return sigtest.StartRedis(t) }

// urlRuntime is sigtest.URLRuntime.
func urlRuntime(t *testing.T, url, prefix, id string, agent signals.Agent, hook redis.Hook, opts ...signals.Option) (*signals.Runtime, func()) {
	t.Helper()
	return sigtest.URLRuntime(t, url, prefix, id, agent, hook, opts...)
}
