package signals_test

import (
	"cmp"
	"context"
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
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

// benchScriptTimes turns on, when LEASEBUS_BENCH_SCRIPTS=1, a breakdown of
// redis-server's time by command, Lua script and kind of key, for
// BenchmarkSignalsThroughput: it logs every command to the server's SLOWLOG
// (slowlog-log-slower-than 0) from here on, and the returned function logs
// where the time went, per signal. A script is named by its file in
// redisstreams/lua (matched by SHA1), its key by the runtime's key kind
// (signals.thread, signals.done, signals.work, …). A script's time includes
// that of the commands it calls, which the SLOWLOG also lists on their own
// (in capitals). The log itself costs the server time: compare the figures
// with each other, not with a run without it. Without the variable it does
// nothing.
func benchScriptTimes(b *testing.B, c *redis.Client) func(n int) {
	if os.Getenv("LEASEBUS_BENCH_SCRIPTS") != "1" {
		return func(int) {}
	}
	ctx := context.Background()
	for _, kv := range [][2]string{{"slowlog-max-len", "4000000"}, {"slowlog-log-slower-than", "0"}} {
		if err := c.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.SlowLogReset(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	names := map[string]string{} // SHA1 (hex), or "src:" and its source → script file
	files, _ := filepath.Glob("../redisstreams/lua/*.lua")
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		names[fmt.Sprintf("%x", sha1.Sum(src))] = filepath.Base(f)
		names["src:"+string(src)] = filepath.Base(f) // EVAL sends the source
		names["src:"+benchLuaCode(string(src))] = filepath.Base(f)
	}
	return func(n int) {
		if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "10000000").Err(); err != nil {
			b.Fatal(err)
		}
		logs, err := c.SlowLogGet(ctx, -1).Result()
		if err != nil {
			b.Fatal(err)
		}
		type agg struct{ calls, us int64 }
		by := map[string]*agg{}
		for _, l := range logs {
			k := benchSlowlogName(l.Args, names)
			a := by[k]
			if a == nil {
				a = &agg{}
				by[k] = a
			}
			a.calls++
			a.us += l.Duration.Microseconds()
		}
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return by[keys[i]].us > by[keys[j]].us })
		for _, k := range keys {
			if a := by[k]; float64(a.us)/float64(n) >= 0.5 {
				b.Logf("redis-server time: %-44s %5.2f calls/signal %6.1f µs/signal (%5.1f µs/call)", k, float64(a.calls)/float64(n), float64(a.us)/float64(n), float64(a.us)/float64(a.calls))
			}
		}
		b.Logf("redis-server time: %d commands logged (a few may be the benchmark's own)", len(logs))
	}
}

// benchSlowlogName names a SLOWLOG entry by its arguments: the command, for
// a script its file (names) and, for commands with a key, the kind of key.
func benchSlowlogName(args []string, names map[string]string) string {
	if len(args) == 0 {
		return "?"
	}
	cmd := args[0]
	name, keyAt := cmd, 1
	switch strings.ToLower(cmd) {
	case "evalsha", "eval":
		if len(args) < 3 {
			return cmd
		}
		sha := args[1]
		if strings.EqualFold(cmd, "eval") {
			// The SLOWLOG keeps only the start of a long argument
			// ("… (N more bytes)"): match the script by its start.
			body, _, _ := strings.Cut(sha, "... (")
			sha = ""
			for k, v := range names {
				if strings.HasPrefix(k, "src:") && strings.HasPrefix(k[len("src:"):], body) {
					sha = v
				}
			}
			name = cmd + " " + cmp.Or(sha, "?")
		} else {
			name = cmd + " " + cmp.Or(names[sha], sha[:min(10, len(sha))])
		}
		keyAt = 3
	case "xreadgroup", "xread":
		return name
	}
	if len(args) <= keyAt {
		return name
	}
	key := args[keyAt]
	if i := strings.Index(key, "signals."); i >= 0 {
		key = key[i:]
		// signals.<kind>.<thread>: keep the kind
		if j := strings.IndexAny(key[len("signals."):], ".}"); j >= 0 {
			key = key[:len("signals.")+j]
		}
	} else {
		key = "other"
	}
	return name + " [" + key + "]"
}

// benchLuaCode is redisstreams' luaCode: src without its comment and blank
// lines (publish_for.lua is sent that way, with EVAL).
func benchLuaCode(src string) string {
	var sb strings.Builder
	for line := range strings.Lines(src) {
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		sb.WriteString(line)
	}
	return sb.String()
}
