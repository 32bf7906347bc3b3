package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Deployment is one way of running Redis that every conformance run of a
// Redis backend covers.
type Deployment struct {
	// Name names the subtest: "Standalone", "Cluster", "Sentinel" or
	// "Miniredis".
	Name string
	// Real is false for miniredis, an in-process imitation: a run on it is a
	// quick check, never the only proof.
	Real bool
	// Start starts a private deployment for t, stopped at t's cleanup.
	Start func(t testing.TB) *Deployed
}

// Deployed is a running Deployment.
type Deployed struct {
	// NewClient returns a new client of the deployment with go-redis's
	// default options (a *redis.Client as redisstreams.NewURL builds it, a
	// *redis.ClusterClient or a Sentinel failover client), closed at the cleanup of the t it is
	// given. Two clients are two processes' views of one store.
	NewClient func(t testing.TB) redis.UniversalClient
	// FastForward moves the server's clock by d, for lease expiry without
	// sleeping. It is nil on real servers, whose clock is real time.
	FastForward func(d time.Duration)
}

// Deployments returns the deployments of the conformance runs: a private
// redis-server, a 3-master Cluster, a Sentinel deployment (a master, one
// replica, one sentinel) and miniredis. Starting a real one skips or fails
// the test as Require says when redis-server is missing.
func Deployments() []Deployment {
	return []Deployment{
		{Name: "Standalone", Real: true, Start: func(t testing.TB) *Deployed {
			s := Start(t, Options{})
			return &Deployed{NewClient: func(t testing.TB) redis.UniversalClient { return s.Client(t) }}
		}},
		{Name: "Cluster", Real: true, Start: func(t testing.TB) *Deployed {
			c := StartCluster(t, 3)
			return &Deployed{NewClient: func(t testing.TB) redis.UniversalClient { return c.Client(t) }}
		}},
		{Name: "Sentinel", Real: true, Start: func(t testing.TB) *Deployed {
			s := StartSentinel(t, 1)
			return &Deployed{NewClient: func(t testing.TB) redis.UniversalClient { return s.Client(t) }}
		}},
		{Name: "Miniredis", Real: false, Start: func(t testing.TB) *Deployed {
			m := miniredis.RunT(t)
			return &Deployed{
				NewClient: func(t testing.TB) redis.UniversalClient {
					c := redis.NewClient(&redis.Options{Addr: m.Addr()})
					t.Cleanup(func() { _ = c.Close() })
					return c
				},
				FastForward: m.FastForward,
			}
		}},
	}
}

// ForEachDeployment runs f as one subtest of t per deployment of
// Deployments, named after it, on a deployment started for that subtest.
func ForEachDeployment(t *testing.T, f func(t *testing.T, d *Deployed)) {
	t.Helper()
	for _, dep := range Deployments() {
		t.Run(dep.Name, func(t *testing.T) { f(t, dep.Start(t)) })
	}
}
