package leasebusotel_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	leasebusotel "github.com/leasebus/leasebus/otel"
)

// childEnv makes the test binary a child process of
// TestSendRunTraceAcrossProcesses.
const childEnv = "LEASEBUS_OTEL_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child(os.Getenv(childEnv)))
	}
	goleak.VerifyTestMain(m)
}

// telemetry is an Instrumentation whose spans and metrics a test reads: the
// SDK's in-memory span exporter and a manual metric reader.
type telemetry struct {
	in     *leasebusotel.Instrumentation
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t testing.TB) *telemetry {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	in, err := leasebusotel.New(leasebusotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return &telemetry{in: in, spans: spans, reader: reader, tp: tp}
}

// sum returns the sum of the int64 data points of the counter (or
// up-down counter) name whose attributes include attrs; for a histogram,
// the number of recordings.
func (tm *telemetry) sum(t testing.TB, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	has := func(set attribute.Set) bool {
		for _, kv := range attrs {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					if has(dp.Attributes) {
						n += dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					if has(dp.Attributes) {
						n += int64(dp.Count)
					}
				}
			}
		}
	}
	return n
}

// span returns the first ended span named name, or fails.
func (tm *telemetry) span(t testing.TB, name string) tracetest.SpanStub {
	t.Helper()
	ss := tm.spans.GetSpans()
	i := slices.IndexFunc(ss, func(s tracetest.SpanStub) bool { return s.Name == name })
	if i < 0 {
		var names []string
		for _, s := range ss {
			names = append(names, s.Name)
		}
		t.Fatalf("no span %q among %q", name, names)
	}
	return ss[i]
}

// waitSpan waits up to 10s for a span named name to end (a consumer span
// ends after its handler returned) and returns it.
func (tm *telemetry) waitSpan(t testing.TB, name string) tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range tm.spans.GetSpans() {
			if s.Name == name {
				return s
			}
		}
		if time.Now().After(deadline) {
			return tm.span(t, name) // fails with the names
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func attrOf(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
