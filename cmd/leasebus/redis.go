package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/keys"
	"github.com/leasebus/leasebus/internal/redisurl"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// connectTimeout bounds connecting to Redis, so that a server that is down
// gives an error quickly instead of a hang.
const connectTimeout = 3 * time.Second

// defaultTimeout is the default --timeout of leases, threads, publish and
// topics delete: how long they wait for Redis once connected.
const defaultTimeout = 10 * time.Second

// timeoutFlag registers --timeout, the bound on a command's (or a --watch
// round's) calls to Redis once connected (bounded applies it).
func (fs *flagSet) timeoutFlag() *time.Duration {
	return fs.Duration("timeout", defaultTimeout, "how long to wait for Redis once connected (connecting gives up after 3s): a Redis\nthat stops answering or is overloaded makes the command exit 1 after this `duration`;\nraise it to list a large deployment over a slow link")
}

// checkTimeout rejects a --timeout that is not positive.
func checkTimeout(d time.Duration) error {
	if d <= 0 {
		return usageErrorf("--timeout %v is not positive", d)
	}
	return nil
}

// bounded returns f's result, or an error naming --timeout (after "what: "
// unless what is empty) when f has not returned within d: a Redis that stopped answering (or is overloaded) can
// hold a go-redis call for its timeouts and retries, 10s and more, whatever
// the ctx says (no ContextTimeoutEnabled). f's ctx ends after d; a call f
// left behind ends with the process.
func bounded[T any](ctx context.Context, d time.Duration, what string, f func(ctx context.Context) (T, error)) (T, error) {
	bctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	v, err := untilDone(bctx, f)
	if err == nil || ctx.Err() != nil || bctx.Err() == nil {
		return v, err
	}
	if what != "" {
		what += ": "
	}
	const why = "Redis stopped answering or is slow (raise --timeout for a large deployment)"
	if errors.Is(err, context.DeadlineExceeded) {
		return v, &timedOutError{msg: fmt.Sprintf("%snot done within --timeout %v: %s", what, d, why)}
	}
	return v, &timedOutError{msg: fmt.Sprintf("%snot done within --timeout %v: %s: %v", what, d, why, err), err: err}
}

// timedOutError is bounded's error when --timeout ran out; err is what the
// call returned then, if it was not the timeout itself.
type timedOutError struct {
	msg string
	err error
}

func (e *timedOutError) Error() string { return e.msg }
func (e *timedOutError) Unwrap() error { return e.err }

// closeGrace bounds closing a command's Backend, controllerGrace its
// signals.Controller and unsubscribeGrace tail's subscription, as the
// command exits (done, failed or interrupted): a Redis that stopped
// answering must not hold the exit for go-redis's timeouts and retries.
// What is left then (a subscription's read, an ack) ends with the process;
// the server drops its connections. leases, threads and tail close at most
// one of the other two before their Backend, so they exit within 1.5s of
// Ctrl-C plus the process's own exit, inside the 2s TestCtrlCOnStoppedRedis
// holds them
// to (tail once waited a whole closeGrace for its Unsubscribe: 2.004s
// under the race detector on a loaded machine).
const (
	closeGrace       = time.Second
	controllerGrace  = 500 * time.Millisecond
	unsubscribeGrace = 500 * time.Millisecond
)

// closeBackend closes b within closeGrace (Backend.Shutdown).
func closeBackend(b *redisstreams.Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	_ = b.Shutdown(ctx)
}

// closeController closes c, waiting for it up to controllerGrace
// (Controller.Close takes no ctx).
func closeController(c *signals.Controller) {
	done := make(chan struct{})
	go func() {
		_ = c.Close()
		close(done)
	}()
	t := time.NewTimer(controllerGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// quietRedisLog drops go-redis's internal log lines (dial retries and the
// like): the command reports errors itself, in one line.
type quietRedisLog struct{}

// Printf drops the line.
func (quietRedisLog) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedisLog{}) }

// connect returns a Backend on the Redis at rawURL. A malformed URL or an
// unreachable server gives an error that exits 2.
func connect(ctx context.Context, rawURL string, o redisstreams.Options, logw io.Writer) (*redisstreams.Backend, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if err := checkRedisURL(rawURL); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	b, err := redisstreams.NewURL(ctx, rawURL, o)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, redisstreams.ErrInvalid):
		return nil, usageErrorf("bad --redis URL %q: %v", redact(rawURL), err)
	case ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("cannot reach Redis at %s within %v", redact(rawURL), connectTimeout)}
	default:
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // drop "redisstreams: connect <addr>:", the URL says it
		}
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("cannot reach Redis at %s: %v", redact(rawURL), err)}
	}
}

// redisSchemes are the URL schemes --redis takes (those redis.ParseURL
// parses).
var redisSchemes = []string{"redis", "rediss", "unix"}

// checkRedisURL returns a usage error that says what a Redis URL looks like
// when raw is not one, instead of go-redis's terse "invalid URL scheme". A
// redis:// or rediss:// URL without a host ("redis://", what
// "redis://$HOST" gives with HOST unset) is refused too: go-redis would
// quietly read it as localhost:6379, a server the operator never named.
func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err == nil && slices.Contains(redisSchemes, u.Scheme) {
		if u.Scheme == "unix" || u.Hostname() != "" {
			return nil
		}
		return usageErrorf("bad --redis URL %q: no host; want redis://[:password@]host:port[/db]", redact(raw))
	}
	if err == nil && strings.Contains(u.Scheme, "sentinel") {
		return usageErrorf("bad --redis URL %q: the command does not speak Redis Sentinel; give the master's redis://host:port URL (SENTINEL GET-MASTER-ADDR-BY-NAME <name> on a Sentinel names it)", redact(raw))
	}
	return usageErrorf("bad --redis URL %q: want redis://[:password@]host:port[/db], rediss://... (TLS) or unix:///path/to/socket", redact(raw))
}

// checkKeyspace rejects an empty --keyspace (Options.Prefix "" would quietly
// mean the default prefix, not "no prefix") and one the backend refuses,
// naming --keyspace (connect would blame the --redis URL).
func checkKeyspace(keyspace string) error {
	if keyspace == "" {
		return usageErrorf("--keyspace is empty; want the key prefix of the deployment (default %q)", redisstreams.DefaultPrefix)
	}
	if _, err := keys.NewSpace(keyspace); err != nil {
		return usageErrorf("--keyspace %q: %v", keyspace, err)
	}
	return nil
}

// backend connects the operator commands (leases, tail, publish) to the
// Redis that --redis (or the environment) names, with keys under keyspace.
func (fs *flagSet) backend(ctx context.Context, redisFlag *string, keyspace string, logw io.Writer) (*redisstreams.Backend, error) {
	if err := checkKeyspace(keyspace); err != nil {
		return nil, err
	}
	url := fs.redisURL(redisFlag)
	if url == "" {
		return nil, needRedis()
	}
	return connect(ctx, url, redisstreams.Options{Prefix: keyspace}, logw)
}

// redact hides the password of a Redis URL, also of one net/url cannot
// parse (redisurl.Redact).
func redact(raw string) string { return redisurl.Redact(raw) }

// redisOptions returns the Backend options of the operator commands.
func redisOptions() redisstreams.Options { return redisstreams.Options{} }

// needRedis returns the usage error of a command that needs a server.
func needRedis() error {
	return usageErrorf("no Redis server: pass --redis URL or set %s (e.g. redis://localhost:6379)", redisEnv)
}

// embedded is an in-process Redis-protocol server (miniredis) on a loopback
// port: the default server of the demo, so it needs nothing installed.
type embedded struct {
	m *miniredis.Miniredis
}

// startEmbedded starts the embedded server. Keys expire as the wall clock
// moves, as on a real server (lease TTLs depend on it).
func startEmbedded() (*embedded, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start embedded Redis: %w", err)
	}
	return &embedded{m: m}, nil
}

// URL returns the server's redis:// URL.
func (s *embedded) URL() string { return "redis://" + s.m.Addr() }

// Close stops the server.
func (s *embedded) Close() { s.m.Close() }
