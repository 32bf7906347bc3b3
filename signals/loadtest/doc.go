// Package loadtest holds the load and fault tests of the signals runtime
// (from about 10s to over a minute each): many threads active at once on go-redis's
// default pools (standalone and Cluster), a redis-server stopped under load,
// one runtime black-holed under load, a Sentinel failover under load,
// one that loses a second of writes (with and without the replica sync
// options), a Cluster failover under load, a Cluster master stopped
// past the node timeout under load, and Cluster slots moved under load (a
// resharding). They
// are a package of their own so that `go test ./...` runs them beside the
// signals package's other tests, each test binary well within go test's
// default 10-minute timeout. The package has no API; see its _test.go files.
package loadtest
