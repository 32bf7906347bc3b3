package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/pubsub"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// Tests of review h54 (helper 54, 2026-11-29): an operator's view of the
// command against a real redis-server.

// TestBadKeyspaceNamesKeyspace: doc.go says "2 for invalid flags or
// arguments ... (errors are one line on stderr)", and every command has
// --keyspace. A --keyspace the backend refuses ("a{b}": braces are Redis
// Cluster hash-tag syntax) must be reported as a bad --keyspace, as "topics
// delete" does ("--keyspace "a{b}": keys: prefix ..."), not blamed on the
// --redis URL, which is fine.
//
// Found by review h54: leases, leases revoke, threads, threads cancel, tail
// and publish printed `bad --redis URL "redis://127.0.0.1:N": redisstreams:
// invalid argument: Prefix: keys: prefix "a{b}" holds one of {}*?[]\`
// (connect maps every redisstreams.ErrInvalid to "bad --redis URL").
func TestBadKeyspaceNamesKeyspace(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, args := range [][]string{
		{"leases"},
		{"leases", "revoke", "k", "--reason", "r"},
		{"threads"},
		{"threads", "cancel", "t"},
		{"tail", "orders"},
		{"publish", "orders", "--type", "t"},
		{"topics", "delete", "orders"},
	} {
		args = append(args, "--keyspace", "a{b}", "--redis", srv.URL())
		r := leasebus(t, 20*time.Second, args...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 ||
			!strings.Contains(r.stderr, `--keyspace "a{b}"`) || strings.Contains(r.stderr, "bad --redis URL") {
			t.Errorf("leasebus %v: exit %d, stderr %q; want 2 and one line naming --keyspace \"a{b}\" (not the --redis URL)",
				args, r.code, r.stderr)
		}
	}
}

// TestRedisURLWithoutHost: --redis is documented as "Redis URL
// (redis://[:password@]host:port[/db], rediss://, unix://)" and README
// says "Invalid flags and unreachable servers give one line on stderr and
// exit code 2". A URL without a host ("redis://", what
// --redis "redis://$REDIS_HOST" gives with the variable unset) is not one:
// it must be refused, not quietly read as localhost:6379, where another
// server (this machine runs one) answers "no live leases", exit 0.
//
// Found by review h54: "leasebus leases --redis redis://" printed "no live
// leases" and exited 0 (it listed the system redis-server on
// 127.0.0.1:6379); without a server there it says "cannot reach Redis at
// redis://: ... 127.0.0.1:6379 ... connection refused", naming a server the
// operator never gave.
func TestRedisURLWithoutHost(t *testing.T) {
	for _, u := range []string{"redis://", "rediss://", "redis://:secret@", "redis:///0"} {
		r := leasebus(t, 20*time.Second, "leases", "--redis", u)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "bad --redis URL") {
			t.Errorf("leases --redis %q: exit %d, stdout %q, stderr %q; want 2 and one line \"bad --redis URL\"", u, r.code, r.stdout, r.stderr)
		}
	}
}

// TestThreadsCancelDropMarkCountsAsQueued: "threads --help" said the
// listing shows "the signals queued (not taken by a run yet) ... and when
// the last signal was sent", and signals.ThreadStatus "Queued counts the
// signals accepted for the thread that no run has taken yet"; "threads
// cancel --drop-queued" sends no signal.
//
// Found by review h54: each "threads cancel T --drop-queued" whose owner did
// not answer added 1 to QUEUED and set LAST SIGNAL to "now": the drop mark
// Controller.Cancel puts into the thread's inbox (dropMarkType) is an inbox
// entry like a signal, and Status reads the inbox's backlog, which cannot
// tell them apart. Telling them apart would take reading every queued
// entry; the docs now say what is counted (ThreadStatus.Queued and
// LastSignal, "threads --help"), and this test holds the listing to them:
// after two such cancels on a thread with no signal, QUEUED is exactly 2,
// IN FLIGHT 0, LAST SIGNAL set, and the help says why.
func TestThreadsCancelDropMarkCountsAsQueued(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	heldThread(t, srv, "t") // leased by gone-7, which does not answer; no signal sent
	for range 2 {
		r := leasebus(t, 20*time.Second, "threads", "cancel", "t", "--drop-queued", "--timeout", "300ms", "--redis", srv.URL())
		if r.code != exitFailed {
			t.Fatalf("threads cancel --drop-queued with a dead owner: exit %d, stderr %q; want 1", r.code, r.stderr)
		}
	}
	r := leasebus(t, 20*time.Second, "threads", "--redis", srv.URL())
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 {
		t.Fatalf("threads: exit %d, stdout %q, stderr %q; want a header and one row", r.code, r.stdout, r.stderr)
	}
	f := strings.Fields(lines[1])
	// THREAD PROCESS RUN TOKEN TIME-LEFT QUEUED IN-FLIGHT LAST
	if len(f) < 8 || f[0] != "t" {
		t.Fatalf("threads row %q", lines[1])
	}
	if f[5] != "2" || f[6] != "0" || f[7] == "-" {
		t.Errorf("threads row %q: QUEUED %s, IN FLIGHT %s, LAST SIGNAL %s; want 2 (the two drop marks, as documented), 0 and a time",
			lines[1], f[5], f[6], strings.Join(f[7:], " "))
	}
	h := leasebus(t, 20*time.Second, "threads", "--help")
	if !strings.Contains(strings.Join(strings.Fields(h.stdout+h.stderr), " "), `each "threads cancel --drop-queued" also puts a mark`) {
		t.Errorf("threads --help does not say that QUEUED counts drop marks:\n%s%s", h.stdout, h.stderr)
	}
}

// TestWatchSurvivesRedisStall: "leases --help" and "threads --help" say
// "With --watch, redraw every --interval until interrupted (Ctrl-C)". An
// operator watches exactly when Redis is in trouble: a stall of some
// seconds (SIGSTOP for 12s, then SIGCONT, as a long fork or a failover can
// give) must not end the watch; once Redis answers again the list is
// redrawn, and Ctrl-C then exits 0. (A 5s stall is survived today: the
// listing's retries outlast it.)
//
// Found by review h54: both exited 1 during the stall (2 of 2) ("leasebus leases:
// list leases: redisstreams: list leases "": scan leasebus:lease:{*}: i/o
// timeout"), so the watch was gone when Redis came back
// (watchFlags.refresh returns the first listing error).
func TestWatchSurvivesRedisStall(t *testing.T) {
	for _, args := range [][]string{{"leases", "--watch"}, {"threads", "--watch"}} {
		t.Run(args[0], func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			heldThread(t, srv, "t")
			cmd := exec.Command(bin, append(args, "--interval", "200ms", "--redis", srv.URL())...)
			cmd.Env = append(os.Environ(), redisEnv+"=")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb strings.Builder
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			rounds := 0
			scanned := make(chan struct{})
			go func() {
				defer close(scanned)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if strings.Contains(sc.Text(), "lease(s)") || strings.Contains(sc.Text(), "thread(s) held") {
						mu.Lock()
						rounds++
						mu.Unlock()
					}
				}
			}()
			count := func() int { mu.Lock(); defer mu.Unlock(); return rounds }
			exited := make(chan error, 1)
			go func() { <-scanned; exited <- cmd.Wait() }()
			defer func() { _ = cmd.Process.Kill() }()

			deadline := time.Now().Add(10 * time.Second)
			for count() == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if count() == 0 {
				t.Fatalf("no refresh within 10s; stderr %q", errb.String())
			}
			srv.Pause(t)
			time.Sleep(12 * time.Second)
			srv.Resume(t)
			before := count()
			deadline = time.Now().Add(10 * time.Second)
			for count() == before && time.Now().Before(deadline) {
				select {
				case err := <-exited:
					t.Fatalf("leasebus %v exited during a 12s stall of Redis (%v), stderr %q; want it to go on refreshing until interrupted", args, err, errb.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
			if count() == before {
				t.Fatalf("no refresh within 10s after Redis answered again; stderr %q", errb.String())
			}
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("leasebus %v after Ctrl-C: %v, want exit 0; stderr %q", args, err, errb.String())
				}
			case <-time.After(10 * time.Second):
				t.Errorf("leasebus %v did not exit within 10s of Ctrl-C", args)
			}
		})
	}
}

// TestEmptyKeyOrThreadExit2: doc.go says "2 for invalid flags or
// arguments", and tail, publish and topics delete refuse an empty TOPIC so
// ("TOPIC is empty", exit 2). An empty KEY of "leases revoke" or THREAD of
// "threads cancel" (what "leases revoke "$KEY"" gives with KEY unset) is an
// invalid argument too.
//
// Found by review h54: both exited 1 ("leasebus threads: signals: invalid
// argument: thread is empty", "leasebus leases: lease: invalid argument:
// lease key is empty"), as for a failure while running, after connecting.
func TestEmptyKeyOrThreadExit2(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, args := range [][]string{
		{"leases", "revoke", "", "--reason", "r"},
		{"threads", "cancel", ""},
	} {
		r := leasebus(t, 20*time.Second, append(args, "--redis", srv.URL())...)
		if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("leasebus %q: exit %d, stderr %q; want 2 (an invalid argument) and one line", args, r.code, r.stderr)
		}
	}
}

// TestLeasesOnClusterNodeNotPartial: README says the Redis backend runs on
// "standalone, Sentinel or Cluster", and the command "looks into a running
// deployment" (doc.go: "leases  list live leases"). Given the URL of one
// node of a Cluster deployment, "leasebus leases" must list every live
// lease of the deployment, or refuse with a clear error that names the
// Cluster; never list one node's share as if it were all, exit 0.
//
// Found by review h54: 6 leases on a 3-master Cluster; "leases --redis
// redis://<node>" listed the 2 on that node, exit 0, on each of the 3
// nodes; "leases revoke" of a key on another node failed with a bare
// "MOVED 12685 127.0.0.1:N" (connect uses redisstreams.NewURL, a
// single-node client, whatever the server is).
func TestLeasesOnClusterNodeNotPartial(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	o := c.ClientOptions()
	o.ContextTimeoutEnabled = true
	client := redis.NewClusterClient(o)
	defer client.Close()
	b, err := redisstreams.New(client, redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for i := range n {
		if _, err := b.AcquireLease(context.Background(), fmt.Sprintf("job-%d", i), "w", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range c.Addrs() {
		r := leasebus(t, 20*time.Second, "leases", "--redis", "redis://"+a)
		listed := strings.Count(r.stdout, "job-")
		refused := r.code != 0 && strings.Contains(strings.ToLower(r.stderr), "cluster") && strings.Count(r.stderr, "\n") == 1
		if !(r.code == 0 && listed == n) && !refused {
			t.Errorf("leases --redis redis://%s (a Cluster node): exit %d, %d of the %d leases listed, stderr %q; want all %d, or a one-line error naming the Cluster",
				a, r.code, listed, n, r.stderr, n)
		}
	}
}

// TestTailOneLinePerEvent: "tail --help" says "Print the events of TOPIC as
// they arrive, one line each" (and doc.go "one line each (time, id, type,
// data)"). Data is folded to one line; an event whose type, id, run id or
// metadata holds a newline (any producer can publish one: a metadata value
// carrying an error message, say) must stay on one line as well, or a
// reader (or a script reading line by line) takes its tail for another
// event.
//
// Found by review h54: 3 such events printed as 7 lines ("...  two" /
// "lines  -"); formatEvent folds only the data.
func TestTailOneLinePerEvent(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, ev := range []pubsub.Event{
		{Type: "two\nlines"},
		{Type: "t", Metadata: map[string]string{"error": "line 1\nline 2"}},
		{ID: "id\nx", Type: "t", RunID: "r\nun"},
	} {
		if err := b.Publish(context.Background(), "nl", ev); err != nil {
			t.Fatal(err)
		}
	}
	r := leasebus(t, 20*time.Second, "tail", "nl", "--from", "earliest", "--count", "3", "--redis", srv.URL())
	if r.code != 0 {
		t.Fatalf("tail: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("tail printed 3 events as %d lines, want one line each:\n%s", n, r.stdout)
	}
}

// TestListingsOneRowPerEntry: "leases" and "threads" print a table, one
// row per lease or thread under a header (README's tour). A thread name or
// process id holding a tab or a newline (signals takes any non-empty
// string) must not shift the columns or split a row.
//
// Found by review h54: thread "tab\there" held by process "p\tq" printed
// as a row of 10 fields where a row has 8, and thread "new\nline"
// as two rows (printThreads, printLeases write the strings as they are
// into a tabwriter).
func TestListingsOneRowPerEntry(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, th := range []string{"tab\there", "new\nline"} {
		if _, err := b.AcquireLease(context.Background(), signals.LeaseKey(th), "p\tq/run-1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args   []string
		fields int // of a row: THREAD PROCESS RUN TOKEN TIME-LEFT QUEUED IN-FLIGHT "-"; KEY HOLDER TOKEN TIME-LEFT STATUS
	}{{[]string{"threads"}, 8}, {[]string{"leases"}, 5}} {
		args := tc.args
		r := leasebus(t, 20*time.Second, append(args, "--redis", srv.URL())...)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 3 {
			t.Errorf("%s: exit %d, %d lines, want a header and 2 rows:\n%s", args[0], r.code, len(lines), r.stdout)
			continue
		}
		for _, l := range lines[1:] {
			if got := len(strings.Fields(l)); got != tc.fields {
				t.Errorf("%s: row %q has %d fields, want %d", args[0], l, got, tc.fields)
			}
		}
	}
}
