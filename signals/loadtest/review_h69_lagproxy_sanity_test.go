package loadtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestReviewH69LagProxy checks the proxy itself: a SET written into the
// hole fails at the client's timeout, and Redis runs it once the path heals.
func TestReviewH69LagProxy(t *testing.T) {
	srv, c := startRedis(t)
	p := newLagProxy(t, srv.Addr())
	cl := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second, MaxRetries: -1})
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Set(ctx, "k0", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.Hole()
	if err := cl.Set(ctx, "k1", "v", 0).Err(); err == nil {
		t.Fatal("SET in the hole answered")
	}
	if err := cl.Set(ctx, "k2", "v", 0).Err(); err == nil {
		t.Fatal("second SET in the hole answered")
	}
	if n, _ := c.Exists(ctx, "k1", "k2").Result(); n != 0 {
		t.Fatalf("%d keys set during the hole", n)
	}
	<-p.Heal(500 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	n, _ := c.Exists(ctx, "k1", "k2").Result()
	t.Logf("after the heal: %d of k1, k2 set (k1 on the connection open at the hole, k2 on one opened in it)", n)
	if k1, _ := c.Exists(ctx, "k1").Result(); n != 1 || k1 != 1 {
		t.Fatalf("want k1 set late and k2 (written on a connection opened in the hole) never")
	}
	if err := cl.Set(ctx, "k3", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}
