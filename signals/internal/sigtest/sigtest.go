// Package sigtest holds the helpers that the signals package's tests and
// its load tests (signals/loadtest) share: runtimes made as a user makes
// them, on a real redis-server.
package sigtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// StartRedis starts a redis-server for the test (the test skips without
// one on PATH, unless LEASEBUS_REQUIRE_REDIS=1) and returns it with a
// client; t.Cleanup stops both.
func StartRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	redistest.Require(t)
	srv := redistest.Start(t, redistest.Options{})
	return srv, srv.Client(t)
}

// URLRuntime starts runtime id on a redisstreams backend of its own, made
// as a user makes one (redisstreams.NewURL: go-redis's default pool), with
// key prefix prefix and hook added when not nil. stop closes the runtime
// (20s at most) and the backend, once; the test's cleanup calls it too.
func URLRuntime(t *testing.T, url, prefix, id string, agent signals.Agent, hook redis.Hook, opts ...signals.Option) (rt *signals.Runtime, stop func()) {
	t.Helper()
	b, err := redisstreams.NewURL(context.Background(), url, redisstreams.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		b.Client().AddHook(hook)
	}
	rt, err = signals.New(b, agent, append([]signals.Option{signals.WithProcessID(id)}, opts...)...)
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := rt.Close(ctx); err != nil {
				t.Errorf("runtime %s Close: %v", id, err)
			}
			_ = b.Close()
		})
	}
	t.Cleanup(stop)
	return rt, stop
}
