// Command signals shows the signals runtime across processes. It starts
// three copies of itself, p1, p2 and p3, each with a signals.Runtime on one
// shared Redis, tells them to send signals to two threads in a fixed order,
// and prints who ran what:
//
//   - the first Send to an idle thread wins its lease and starts a run in
//     the sending process (Woke);
//   - a Send from the process whose run holds the thread queues the signal
//     for that run (Delivered);
//   - a Send from any other process names the owner (Forwarded): the signal
//     waits in the thread's durable inbox, and the owner's run takes it with
//     Run.Next.
//
// Each process's agent prints the signals it ran with the run id and the
// run's fencing token. The program exits 0 when every signal ran once, in
// the order it was sent, and 1 otherwise.
//
// Without --redis it runs on an embedded Redis-protocol server (miniredis)
// on a loopback port, so it needs nothing installed. It works under a fresh
// key prefix and deletes its keys as it exits, also on Ctrl-C (which stops
// it with exit code 130).
//
// Run it with:
//
//	go run ./examples/signals
//	go run ./examples/signals --redis redis://localhost:6379
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// step is one send: process proc sends signal id to thread.
type step struct{ proc, thread, id string }

// script is the order of the sends. Each send waits for the one before it,
// so the order of the signals on each thread is the order of this list.
var script = []step{
	{"p1", "thread-a", "a1"}, // p1 wakes thread-a and starts running it
	{"p2", "thread-b", "b1"}, // p2 wakes thread-b
	{"p2", "thread-a", "a2"}, // forwarded to p1, which holds thread-a
	{"p3", "thread-a", "a3"}, // forwarded to p1
	{"p1", "thread-b", "b2"}, // forwarded to p2
	{"p1", "thread-a", "a4"}, // delivered: p1 holds thread-a itself
	{"p2", "thread-b", "b3"}, // delivered: p2 holds thread-b
}

// later is sent once every signal of script ran and the owners let the
// threads go: p3 wakes thread-a, a new run in another process with a higher
// fencing token.
var later = []step{{"p3", "thread-a", "a5"}}

// work is how long the agent takes per signal: long enough that the later
// sends find the thread busy.
const work = 200 * time.Millisecond

func main() {
	ctx, stop := context.Background(), func() {}
	if len(os.Args) < 2 || os.Args[1] != "child" {
		// Ctrl-C (or SIGTERM) ends the parent's ctx: it stops its children
		// and deletes its keys before it exits (exit code 130). A child
		// dies on the SIGINT as before (the terminal sends it to them all).
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	}
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errInterrupted is the parent's error when ctx ended (Ctrl-C): it exits
// 130, the shell's code for a process ended by SIGINT.
var errInterrupted = errors.New("interrupted")

// run is the program: the parent without arguments or with --redis, a
// child process when the first argument is "child". It returns the exit
// code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var err error
	if len(args) > 0 && args[0] == "child" {
		err = child(ctx, args[1:], stdin, stdout, stderr)
	} else {
		err = parent(ctx, args, stdout, stderr)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0 // --help printed the usage
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(stderr, "signals example: interrupted")
		return 130
	case err != nil:
		fmt.Fprintln(stderr, "signals example:", err)
		return 1
	}
	return 0
}

// child is one process: a runtime whose agent reports each signal it ran as
// "ran THREAD ID RUN TOKEN", and which answers each "send THREAD ID" line on
// stdin with "sent ID ACTION RUN OWNER". It closes the runtime when stdin
// ends.
func child(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	url := fs.String("redis", "", "Redis URL")
	prefix := fs.String("prefix", "", "key prefix")
	name := fs.String("name", "", "process name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", a...)
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	bus, err := redisstreams.NewURL(ctx, *url, redisstreams.Options{Prefix: *prefix, Logger: log})
	if err != nil {
		return err
	}
	defer bus.Close()

	agent := func(ctx context.Context, run *signals.Run) error {
		do := func(s signals.Signal) error {
			select {
			case <-time.After(work):
			case <-ctx.Done():
				return ctx.Err() // the lease was lost: stop at once
			}
			say("ran %s %s %s %d", run.Thread, s.ID, run.ID, run.Token)
			return nil
		}
		for _, s := range run.Signals {
			if err := do(s); err != nil {
				return err
			}
		}
		for { // follow-ups sent while this run holds the thread
			s, ok := run.Next(ctx)
			if !ok {
				return nil
			}
			if err := do(s); err != nil {
				return err
			}
		}
	}
	rt, err := signals.New(bus, agent, signals.WithProcessID(*name), signals.WithLogger(log))
	if err != nil {
		return err
	}

	in := bufio.NewScanner(stdin)
	for in.Scan() {
		var thread, id string
		if _, err := fmt.Sscanf(in.Text(), "send %s %s", &thread, &id); err != nil {
			return fmt.Errorf("bad command %q", in.Text())
		}
		acc, err := rt.Send(ctx, thread, signals.Signal{ID: id, Type: "example.step"})
		if err != nil {
			return err
		}
		say("sent %s %s %s %s", id, acc.Action, acc.RunID, acc.Owner)
	}
	// stdin closed: let the runs finish and hand the leases back.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return rt.Close(cctx)
}

// proc is a child process as the parent sees it.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// line is one line a child printed, split into fields.
type line struct {
	proc   string
	fields []string
}

// parent starts the children, plays the script and checks what ran. The
// children write to stderr directly: it must be safe for concurrent writes.
func parent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("signals", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("redis", "", "Redis `URL` (default: an embedded Redis-protocol server)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		srv := miniredis.NewMiniRedis()
		srv.ClockTTL(true) // keys expire with the wall clock, as leases need
		if err := srv.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
		defer srv.Close()
		*url = "redis://" + srv.Addr()
		fmt.Fprintf(stdout, "embedded Redis-protocol server at %s\n", srv.Addr())
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	prefix := "leasebus-example-" + hex.EncodeToString(rnd[:]) // a fresh keyspace per run
	defer deleteKeys(*url, prefix)

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	lines := make(chan line, 64)
	var readers sync.WaitGroup
	procs := map[string]*proc{}
	names := []string{"p1", "p2", "p3"}
	waited := false
	defer func() { // on an early return: stop the children
		for _, p := range procs {
			if !waited {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	for _, name := range names {
		cmd := exec.Command(exe, "child", "--redis", *url, "--prefix", prefix, "--name", name)
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		p := &proc{name: name, cmd: cmd, stdin: in}
		procs[name] = p
		readers.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- line{name, strings.Fields(sc.Text())}
			}
		})
	}
	go func() { readers.Wait(); close(lines) }()
	fmt.Fprintf(stdout, "3 processes (p1 p2 p3) on %s, keys under %s\n\n", *url, prefix)

	ran := map[string][]string{} // thread -> signal ids in the order they ran
	count := 0
	timeout := time.After(30 * time.Second)
	// show prints one line of a child and counts the signals that ran.
	show := func(l line) {
		switch f := l.fields; {
		case len(f) == 5 && f[0] == "sent":
			if f[2] == "forwarded" {
				owner, _, _ := strings.Cut(f[4], "/")
				fmt.Fprintf(stdout, "%s  send %s  %-9s  to %s, run %s\n", l.proc, f[1], f[2], owner, short(f[3]))
			} else {
				fmt.Fprintf(stdout, "%s  send %s  %-9s  run %s\n", l.proc, f[1], f[2], short(f[3]))
			}
		case len(f) == 5 && f[0] == "ran":
			fmt.Fprintf(stdout, "%s  ran  %s  on %s    run %s, token %s\n", l.proc, f[2], f[1], short(f[3]), f[4])
			ran[f[1]] = append(ran[f[1]], f[2])
			count++
		default:
			fmt.Fprintf(stdout, "%s  %s\n", l.proc, strings.Join(f, " "))
		}
	}
	// next waits for a line from the children.
	next := func() (line, error) {
		select {
		case l, ok := <-lines:
			if !ok {
				return line{}, errors.New("the child processes exited early")
			}
			return l, nil
		case <-timeout:
			return line{}, errors.New("timed out after 30s")
		case <-ctx.Done():
			return line{}, errInterrupted
		}
	}

	// play sends steps one by one, then waits until every signal sent ran.
	sent := 0
	play := func(steps []step) error {
		for _, s := range steps {
			fmt.Fprintf(procs[s.proc].stdin, "send %s %s\n", s.thread, s.id)
			sent++
			for done := false; !done; { // wait for this send's answer
				l, err := next()
				if err != nil {
					return err
				}
				show(l)
				done = l.proc == s.proc && len(l.fields) > 1 && l.fields[0] == "sent" && l.fields[1] == s.id
			}
		}
		for count < sent {
			l, err := next()
			if err != nil {
				return err
			}
			show(l)
		}
		return nil
	}
	if err := play(script); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "... waiting until the owners let the threads go")
	select {
	case <-time.After(signals.DefaultLinger + 300*time.Millisecond):
	case <-ctx.Done():
		return errInterrupted
	}
	if err := play(later); err != nil {
		return err
	}
	for _, p := range procs {
		p.stdin.Close() // the children close their runtimes and exit
	}
	for l := range lines {
		show(l)
	}
	waited = true
	for _, name := range names {
		if err := procs[name].cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}

	fmt.Fprintln(stdout)
	ok := true
	for _, thread := range []string{"thread-a", "thread-b"} {
		var want []string
		for _, s := range append(script, later...) {
			if s.thread == thread {
				want = append(want, s.id)
			}
		}
		verdict := "each ran once, in the order sent"
		if !slices.Equal(ran[thread], want) {
			verdict, ok = fmt.Sprintf("WRONG: sent %v", want), false
		}
		fmt.Fprintf(stdout, "%s: %s  %s\n", thread, strings.Join(ran[thread], " "), verdict)
	}
	if !ok {
		return errors.New("a signal did not run once in order")
	}
	return nil
}

// deleteKeys deletes the keys under prefix, so that the example leaves
// nothing behind on your Redis.
func deleteKeys(url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for it := client.Scan(ctx, 0, prefix+":*", 100).Iterator(); it.Next(ctx); {
		client.Del(ctx, it.Val())
	}
}

// short abbreviates a run id.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
