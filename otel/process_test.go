package leasebusotel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasebus/leasebus/internal/redistest"
	"github.com/leasebus/leasebus/redisstreams"
	"github.com/leasebus/leasebus/signals"
)

// spanLine is how the child reports one of its spans to the parent test.
type spanLine struct {
	Name, Trace, Span, Parent string
	Signals                   []string
}

// child is the other process of TestSendRunTraceAcrossProcesses: a signals
// runtime on the shared Redis, instrumented, exporting to an in-memory
// exporter. It sends "s1" to the thread itself, so that its tenure holds the
// thread (and lingers after each run, waiting for the next signal), prints
// "holding", prints "ran ID" after each run, and when stdin closes closes
// the runtime and prints its spans as JSON lines.
func child(arg string) int {
	url, thread, _ := strings.Cut(arg, "|")
	t := &childTB{}
	tm := newTelemetry(t)
	b, err := redisstreams.NewURL(context.Background(), url, redisstreams.Options{Prefix: "otel-proc"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	agent := func(ctx context.Context, run *signals.Run) error {
		for _, s := range run.Signals {
			fmt.Printf("ran %s\n", s.ID)
		}
		return nil
	}
	rt, err := signals.New(tm.in.Wrap(b), tm.in.Agent(agent), signals.WithObserver(tm.in.Observer(nil)),
		signals.WithProcessID("child"), signals.WithLinger(20*time.Second), signals.WithLeaseTTL(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	acc, err := rt.Send(context.Background(), thread, signals.Signal{ID: "s1", Type: "first"})
	if err != nil || acc.Action != signals.Woke {
		fmt.Fprintln(os.Stderr, "send s1:", acc.Action, err)
		return 1
	}
	fmt.Println("holding")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = rt.Close(ctx)
	for _, s := range tm.spans.GetSpans() {
		l := spanLine{Name: s.Name, Trace: s.SpanContext.TraceID().String(), Span: s.SpanContext.SpanID().String(), Parent: s.Parent.SpanID().String()}
		if v := attrOf(s, "leasebus.signals.signal_ids"); v.Type() != 0 {
			l.Signals = v.AsStringSlice()
		}
		out, _ := json.Marshal(l)
		fmt.Println(string(out))
	}
	return 0
}

// childTB stands in for testing.TB in the child, where newTelemetry's
// cleanups are not needed: the process exits.
type childTB struct{ testing.TB }

func (*childTB) Helper()                   {}
func (*childTB) Cleanup(func())            {}
func (*childTB) Fatal(args ...any)         { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }
func (*childTB) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(1) }

// TestSendRunTraceAcrossProcesses: a Send in this process and the run of
// its signal in another process (a re-executed test binary holding the
// thread) are one trace: the other process's run span descends from this
// process's send span, through the trace context carried in
// Signal.Metadata.
func TestSendRunTraceAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const thread = "thread-otel"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+srv.URL()+"|"+thread)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	await := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child exited before %q", want)
				}
				if l == want {
					return
				}
			case <-timeout:
				t.Fatalf("the child did not print %q", want)
			}
		}
	}
	await("holding")

	tm := newTelemetry(t)
	b, err := redisstreams.NewURL(context.Background(), srv.URL(), redisstreams.Options{Prefix: "otel-proc"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rt, err := signals.New(tm.in.Wrap(b), func(ctx context.Context, run *signals.Run) error {
		t.Errorf("this process ran %s; the child holds the thread", run.Thread)
		return nil
	}, signals.WithObserver(tm.in.Observer(nil)), signals.WithProcessID("parent"), signals.WithLeaseTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	ctx, root := tm.tp.Tracer("test").Start(context.Background(), "request")
	acc, err := tm.in.Send(ctx, rt, thread, signals.Signal{ID: "s2", Type: "follow-up"})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if acc.Action != signals.Forwarded || !strings.HasPrefix(acc.Owner, "child/") {
		t.Fatalf("Send: %v to %q, want forwarded to the child", acc.Action, acc.Owner)
	}
	await("ran s2")
	stdin.Close()
	var childSpans []spanLine
	for l := range lines {
		var s spanLine
		if json.Unmarshal([]byte(l), &s) == nil && s.Name != "" {
			childSpans = append(childSpans, s)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}

	traceID := root.SpanContext().TraceID().String()
	ours := map[string]string{} // span id -> name, of this process's spans in the trace
	for _, s := range tm.spans.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID {
			ours[s.SpanContext.SpanID().String()] = s.Name
		}
	}
	send := tm.span(t, "signals send")
	if send.Parent.SpanID() != root.SpanContext().SpanID() || send.SpanKind != trace.SpanKindProducer {
		t.Errorf("send span: parent %s kind %v, want the caller's span, producer", send.Parent.SpanID(), send.SpanKind)
	}
	if got := attrOf(send, "leasebus.signals.action").AsString(); got != "forwarded" {
		t.Errorf("send span action %q, want forwarded", got)
	}
	var run *spanLine
	for i, s := range childSpans {
		if s.Name == "signals run" && len(s.Signals) == 1 && s.Signals[0] == "s2" {
			run = &childSpans[i]
		}
	}
	if run == nil {
		t.Fatalf("the child exported no run span for s2: %+v", childSpans)
	}
	if run.Trace != traceID {
		t.Errorf("the child's run of s2 is in trace %s, want the sender's %s", run.Trace, traceID)
	}
	if ours[run.Parent] == "" {
		t.Errorf("the run span's parent %s is not a span of the sending process (%v)", run.Parent, ours)
	}
	if n := tm.sum(t, "leasebus.signals.send.duration"); n != 1 {
		t.Errorf("send.duration recordings = %d, want 1", n)
	}
	if n := tm.sum(t, "leasebus.signals.sent"); n != 1 {
		t.Errorf("signals.sent = %d, want 1", n)
	}
}
