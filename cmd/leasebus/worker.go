package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasebus/leasebus/internal/backoff"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// workerCommand is the hidden subcommand the demo re-executes itself with.
const workerCommand = "demo-worker"

// workerConfig is what the demo tells each worker.
type workerConfig struct {
	url, keyspace, stream, name string
	index, workers, threads     int
	signals, perRun             int
	seed                        uint64
	ttl, recovery, work         time.Duration
	fault                       string
}

// args returns the worker's command line.
func (c workerConfig) args() []string {
	return []string{workerCommand,
		"--redis", c.url, "--keyspace", c.keyspace, "--stream", c.stream, "--name", c.name,
		"--index", strconv.Itoa(c.index), "--workers", strconv.Itoa(c.workers), "--threads", strconv.Itoa(c.threads),
		"--signals", strconv.Itoa(c.signals), "--per-run", strconv.Itoa(c.perRun),
		"--seed", strconv.FormatUint(c.seed, 10), "--lease-ttl", c.ttl.String(), "--recovery", c.recovery.String(),
		"--work", c.work.String(), "--break", c.fault,
	}
}

// threadName returns the name of demo thread i (from 1).
func threadName(i int) string { return fmt.Sprintf("thread-%d", i) }

// runWorker is one demo worker process: a signals runtime on the shared
// Redis whose agent records every run in the demo stream. It waits for "go"
// on stdin, sends its share of the signals, and runs until stdin closes.
func runWorker(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, workerCommand, workerCommand+" [flags]", "A demo worker process (started by leasebus demo).")
	var c workerConfig
	fs.StringVar(&c.url, "redis", "", "Redis URL")
	fs.StringVar(&c.keyspace, "keyspace", "", "key prefix")
	fs.StringVar(&c.stream, "stream", "", "demo record stream")
	fs.StringVar(&c.name, "name", "", "worker name")
	fs.IntVar(&c.index, "index", 0, "worker index")
	fs.IntVar(&c.workers, "workers", 1, "number of workers")
	fs.IntVar(&c.threads, "threads", 1, "number of threads")
	fs.IntVar(&c.signals, "signals", 1, "signals per thread")
	fs.IntVar(&c.perRun, "per-run", 2, "signals one run takes at most")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed")
	fs.DurationVar(&c.ttl, "lease-ttl", 2*time.Second, "lease TTL")
	fs.DurationVar(&c.recovery, "recovery", 500*time.Millisecond, "recovery interval")
	fs.DurationVar(&c.work, "work", 150*time.Millisecond, "work per signal")
	fs.StringVar(&c.fault, "break", "", "fault to inject")
	if _, err := fs.parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := connect(ctx, c.url, redisstreams.Options{Prefix: c.keyspace, BlockTime: 500 * time.Millisecond, Logger: log}, e.stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	rec := &recorder{client: b.Client(), stream: c.stream, worker: c.name}
	rng := rand.New(rand.NewPCG(c.seed, uint64(c.index)))
	workFor := func() time.Duration {
		// Work of c.work ± 25%; agents of several threads run at once, so
		// draw from the shared source, which is safe for concurrent use.
		return c.work - c.work/4 + rand.N(c.work/2+1)
	}

	agent := func(ctx context.Context, run *signals.Run) error {
		ids := make([]string, len(run.Signals))
		var redel []string
		for i, s := range run.Signals {
			ids[i] = s.ID
			if i < len(run.Redelivered) && run.Redelivered[i] {
				redel = append(redel, s.ID)
			}
		}
		if err := rec.add(ctx, recStart, "th", run.Thread, "run", run.ID, "tok", strconv.FormatUint(run.Token, 10),
			"sigs", strings.Join(ids, ","), "redel", strings.Join(redel, ",")); err != nil {
			return err
		}
		end := func(err error) error {
			msg := ""
			if err != nil {
				msg = err.Error()
				if cause := context.Cause(ctx); cause != nil {
					msg = cause.Error()
				}
			}
			_ = rec.add(ctx, recEnd, "th", run.Thread, "run", run.ID, "err", msg)
			return err
		}
		// do works on one signal and records that its work is done, before
		// the run acks it by asking for the next one (or returning).
		do := func(id string) error {
			if err := backoff.Sleep(ctx, workFor()); err != nil {
				return err
			}
			return rec.add(ctx, recDid, "th", run.Thread, "run", run.ID, "sig", id)
		}
		taken := len(ids)
		for _, id := range ids {
			if err := do(id); err != nil {
				return end(err)
			}
		}
		for taken < c.perRun {
			sig, ok := run.Next(ctx)
			if !ok {
				break
			}
			taken++
			redel := "0"
			if sig.Redelivered {
				redel = "1"
			}
			if err := rec.add(ctx, recSignal, "th", run.Thread, "run", run.ID, "sig", sig.ID, "redel", redel); err != nil {
				return end(err)
			}
			if err := do(sig.ID); err != nil {
				return end(err)
			}
		}
		return end(ctx.Err())
	}
	observer := func(ev signals.Event) {
		if ev.Kind == signals.Sent || ev.Kind == signals.RunStarted || ev.Kind == signals.SignalGiven {
			return // the sender and the agent record these themselves
		}
		kv := []string{"ev", ev.Kind.String(), "th", ev.Thread, "run", ev.RunID, "owner", ev.Owner,
			"tok", strconv.FormatUint(ev.Token, 10)}
		if ev.PrevRunID != "" {
			kv = append(kv, "prun", ev.PrevRunID, "powner", ev.PrevOwner, "ptok", strconv.FormatUint(ev.PrevToken, 10))
		}
		if ev.Err != nil {
			kv = append(kv, "err", ev.Err.Error())
		}
		_ = rec.add(context.Background(), recObserved, kv...)
	}
	rt, err := signals.New(b, agent,
		signals.WithLeaseTTL(c.ttl), signals.WithRecoveryInterval(c.recovery),
		signals.WithProcessID(c.name), signals.WithObserver(observer), signals.WithLogger(log))
	if err != nil {
		return fmt.Errorf("start runtime: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = rt.Close(cctx)
	}()
	if err := rec.add(ctx, recReady); err != nil {
		return err
	}

	in := bufio.NewScanner(e.stdin)
	if !in.Scan() || in.Text() != "go" {
		return nil // the demo went away before the start
	}
	// The demo's stop is stdin closing: it also ends the sending, so that a
	// stop (the demo's end or Ctrl-C) does not wait for the rest of this
	// worker's share of the signals.
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	stopped := make(chan struct{})
	go func() {
		for in.Scan() {
		}
		stopSending()
		close(stopped)
	}()
	if c.fault == "double-run" && c.index == 0 {
		go doubleRun(ctx, b, rec, c)
	}
	// This worker's share of the signals, in a shuffled order.
	type job struct{ thread, step int }
	var jobs []job
	for th := 1; th <= c.threads; th++ {
		for s := 1; s <= c.signals; s++ {
			if (th+s)%c.workers == c.index {
				jobs = append(jobs, job{th, s})
			}
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for _, j := range jobs {
		if err := backoff.Sleep(sendCtx, time.Duration(20+rng.IntN(120))*time.Millisecond); err != nil {
			break
		}
		thread := threadName(j.thread)
		id := fmt.Sprintf("%s/s%d", thread, j.step)
		data, _ := json.Marshal(map[string]any{"step": j.step, "from": c.name})
		acc, err := rt.Send(sendCtx, thread, signals.Signal{ID: id, Type: "demo.step", Data: data})
		if err != nil && sendCtx.Err() != nil {
			break // stopped: a signal this Send stored may still run, unrecorded as accepted
		}
		if err != nil {
			_ = rec.add(ctx, recSendFail, "th", thread, "sig", id, "err", err.Error())
			continue
		}
		_ = rec.add(ctx, recSent, "th", thread, "sig", id, "act", acc.Action.String(), "run", acc.RunID, "owner", acc.Owner)
	}
	if sendCtx.Err() == nil {
		_ = rec.add(ctx, recSentAll)
	}
	<-stopped // until stdin closes: the demo's stop
	return nil
}

// doubleRun is the fault the demo's --break=double-run injects: it "runs"
// a thread without holding its lease, as soon as it sees another tenure hold
// it, claiming that tenure's token. The verdict must catch it.
func doubleRun(ctx context.Context, b *redisstreams.Backend, rec *recorder, c workerConfig) {
	for ctx.Err() == nil {
		for th := 1; th <= c.threads; th++ {
			thread := threadName(th)
			info, err := b.InspectLease(ctx, signals.LeaseKey(thread))
			if err != nil || info.Owner == "" {
				continue
			}
			id := fmt.Sprintf("rogue-%s", c.name)
			_ = rec.add(ctx, recRogue, "th", thread, "run", id, "tok", strconv.FormatUint(info.Token, 10))
			_ = backoff.Sleep(ctx, 3*c.work)
			_ = rec.add(ctx, recEnd, "th", thread, "run", id)
			return
		}
		_ = backoff.Sleep(ctx, 5*time.Millisecond)
	}
}
