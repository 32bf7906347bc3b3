// Package redistest starts private Redis servers, Redis Cluster nodes and
// connection-cutting TCP proxies for tests.
//
// Every Redis test in leasebus uses it. Servers run as child processes of the
// test binary (redis-server must be on PATH), each on a free loopback port in
// its own t.TempDir(), so tests can kill, pause and restart them without
// touching any other Redis on the machine. When redis-server is missing the
// helpers skip the test, unless LEASEBUS_REQUIRE_REDIS=1, in which case they
// fail it (CI sets this, so real-Redis tests never silently skip there).
//
// Everything a helper starts is stopped and reaped by t.Cleanup: processes are
// killed with SIGKILL and waited for, clients are closed, and proxy goroutines
// are joined, so packages can run goleak.VerifyTestMain.
//
// Wait loops in this package poll with a short interval and are bounded
// (see [ReadyTimeout]); a server that does not come up fails the test with the
// tail of its log.
package redistest
