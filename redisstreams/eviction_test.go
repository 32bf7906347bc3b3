package redisstreams

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/leasebus/leasebus/internal/redistest"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log sink).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEvictionPolicyCheck runs real redis-servers with several
// maxmemory-policy values: NewURL warns, naming the policy, for every policy
// but noeviction, and CheckEviction returns an error matching
// ErrUnsafeEviction that names it. A server with CONFIG renamed away is
// tolerated by NewURL (no warning) and reported as unreadable by
// CheckEviction.
func TestEvictionPolicyCheck(t *testing.T) {
	for _, tc := range []struct {
		policy string
		unsafe bool
	}{
		{"allkeys-lru", true},
		{"volatile-ttl", true},
		{"noeviction", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", tc.policy}})
			var logs syncBuffer
			b, err := NewURL(t.Context(), srv.URL(), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), tc.policy)
			if warned != tc.unsafe {
				t.Errorf("NewURL warned %v, want %v; logs:\n%s", warned, tc.unsafe, logs.String())
			}
			err = b.CheckEviction(t.Context())
			if tc.unsafe {
				var ee *EvictionError
				if !errors.Is(err, ErrUnsafeEviction) || !errors.As(err, &ee) || ee.Policy != tc.policy || !strings.Contains(err.Error(), tc.policy) {
					t.Fatalf("CheckEviction = %v, want ErrUnsafeEviction naming %s", err, tc.policy)
				}
			} else if err != nil {
				t.Fatalf("CheckEviction = %v, want nil", err)
			}
		})
	}
	t.Run("ConfigDisabled", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""}})
		var logs syncBuffer
		b, err := NewURL(t.Context(), srv.URL(), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("NewURL on a server without CONFIG: %v", err)
		}
		defer b.Close()
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("NewURL warned on a server without CONFIG:\n%s", logs.String())
		}
		if err := b.CheckEviction(t.Context()); err == nil || errors.Is(err, ErrUnsafeEviction) {
			t.Fatalf("CheckEviction without CONFIG = %v, want an error saying the policy cannot be read", err)
		}
	})
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		client := c.Client(t)
		if err := client.ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
			t.Fatal(err) // one master
		}
		b := psBackend(t, client, Options{})
		if err := b.CheckEviction(t.Context()); !errors.Is(err, ErrUnsafeEviction) || !strings.Contains(err.Error(), "allkeys-lfu") {
			t.Fatalf("CheckEviction on a Cluster with one allkeys-lfu master = %v, want ErrUnsafeEviction naming it", err)
		}
	})
	t.Run("Miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		var logs syncBuffer
		b, err := NewURL(t.Context(), "redis://"+m.Addr(), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if strings.Contains(logs.String(), "level=WARN") {
			t.Errorf("NewURL warned on miniredis:\n%s", logs.String())
		}
	})
}
