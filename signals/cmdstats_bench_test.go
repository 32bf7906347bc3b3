package signals_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// benchCmdStats returns redis-server's calls per command (INFO
// commandstats) and the server's CPU seconds (used_cpu_user+sys).
func benchCmdStats(b *testing.B, c *redis.Client) (map[string]int64, float64) {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int64{}
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		if name, rest, ok := strings.Cut(line, ":"); ok {
			switch {
			case strings.HasPrefix(name, "cmdstat_"):
				f, more, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				n, _ := strconv.ParseInt(f, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
				// The server's time in the command (µs), kept under a
				// "usec:" key so that the log can show where its CPU goes.
				u, _, _ := strings.Cut(strings.TrimPrefix(more, "usec="), ",")
				us, _ := strconv.ParseInt(u, 10, 64)
				calls["usec:"+strings.TrimPrefix(name, "cmdstat_")] = us
			case name == "used_cpu_user" || name == "used_cpu_sys":
				v, _ := strconv.ParseFloat(rest, 64)
				cpu += v
			}
		}
	}
	return calls, cpu
}

// benchLogCmdStats logs the commands redis-server ran between two
// benchCmdStats readings, per signal, most frequent first, each with the
// server's time in it per signal (a script's time includes the commands it
// calls, which are also counted on their own), and its CPU.
func benchLogCmdStats(b *testing.B, before, after map[string]int64, cpu0, cpu1 float64, n int) {
	type kv struct {
		k string
		v int64
	}
	var all []kv
	var total int64
	usec := map[string]int64{}
	for k, v := range after {
		if name, ok := strings.CutPrefix(k, "usec:"); ok {
			usec[name] = v - before[k]
			continue
		}
		if d := v - before[k]; d > 0 {
			all = append(all, kv{k, d})
			total += d
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	var sb strings.Builder
	for _, e := range all {
		fmt.Fprintf(&sb, " %s=%.2f(%.1fµs)", e.k, float64(e.v)/float64(n), float64(usec[e.k])/float64(n))
	}
	b.Logf("redis-server: %.2f commands/signal, %.1f µs CPU/signal;%s", float64(total)/float64(n), (cpu1-cpu0)*1e6/float64(n), sb.String())
}

// benchSettled waits until the work topic's group has no wake notice
// pending or unread, and returns when it saw that.
func benchSettled(b *testing.B, c *redis.Client) time.Time {
	b.Helper()
	be, err := redisstreams.New(c, redisstreams.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		bl, err := be.GroupBacklog(context.Background(), signals.WorkTopic, signals.WorkGroup)
		if err != nil {
			b.Fatal(err)
		}
		if bl.Pending == 0 && bl.Lag == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			b.Fatalf("wake notices not settled within 1m: %d pending, %d unread", bl.Pending, bl.Lag)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
