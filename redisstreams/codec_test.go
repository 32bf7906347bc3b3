package redisstreams

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/leasebus/leasebus/pubsub"
)

// codecFields turns an XADD field list into what go-redis returns on read.
func codecFields(t testing.TB, fields []string) map[string]any {
	t.Helper()
	if len(fields)%2 != 0 {
		t.Fatalf("odd field list %q", fields)
	}
	m := make(map[string]any, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		if _, dup := m[fields[i]]; dup {
			t.Fatalf("field %q written twice", fields[i])
		}
		m[fields[i]] = fields[i+1]
	}
	return m
}

func codecEqual(a, b pubsub.Event) bool {
	return a.ID == b.ID && a.Type == b.Type && a.RunID == b.RunID &&
		bytes.Equal(a.Data, b.Data) && (a.Data == nil) == (b.Data == nil) &&
		maps.Equal(a.Metadata, b.Metadata) && a.CreatedAt.Equal(b.CreatedAt) &&
		a.DeliveryAttempt == b.DeliveryAttempt
}

func TestCodecRoundTrip(t *testing.T) {
	created := time.Unix(1700000000, 123456789)
	tests := []struct {
		name string
		e    pubsub.Event
	}{
		{"minimal", pubsub.Event{ID: "1", Type: "t"}},
		{"full", pubsub.Event{ID: "id", Type: "type", RunID: "run", Data: json.RawMessage(`{"a":1}`),
			Metadata: map[string]string{"traceparent": "00-abc", "k": ""}, CreatedAt: created}},
		{"empty data", pubsub.Event{ID: "1", Type: "t", Data: json.RawMessage{}}},
		{"binary", pubsub.Event{ID: "\x00{}", Type: "\xff\xfe", RunID: "\x00", Data: json.RawMessage("\x00\x01\xff")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fields, size, err := encodeEvent(tc.e)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			n := 0
			for _, f := range fields {
				n += len(f)
			}
			if size != n {
				t.Errorf("size %d, want %d", size, n)
			}
			got, err := decodeEvent(codecFields(t, fields))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !codecEqual(got, tc.e) {
				t.Errorf("round trip got %+v, want %+v", got, tc.e)
			}
		})
	}
}

func TestCodecRejects(t *testing.T) {
	tests := []struct {
		name   string
		values map[string]any
	}{
		{"plain xadd", map[string]any{"foo": "bar"}},
		{"other version", map[string]any{"v": "2", "id": "1", "type": "t"}},
		{"no id", map[string]any{"v": "1", "type": "t"}},
		{"no type", map[string]any{"v": "1", "id": "1"}},
		{"bad meta", map[string]any{"v": "1", "id": "1", "type": "t", "meta": "{"}},
		{"bad created", map[string]any{"v": "1", "id": "1", "type": "t", "created": "x"}},
		{"not a string", map[string]any{"v": "1", "id": 1, "type": "t"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeEvent(tc.values); !errors.Is(err, errDecode) {
				t.Errorf("decode %v: got %v, want errDecode", tc.values, err)
			}
		})
	}
}

func TestCodecDeadLetters(t *testing.T) {
	e := undecodableEvent("orders", "1-2", map[string]any{"foo": "bar"}, errors.New("bad\xff"))
	fields, _, err := encodeEvent(e)
	if err != nil {
		t.Fatalf("encode undecodable dead letter: %v", err)
	}
	got, err := decodeEvent(codecFields(t, fields))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got.ID != "undecodable:1-2" || string(got.Data) != `{"foo":"bar"}` ||
		got.Metadata[pubsub.MetaDeadTopic] != "orders" || got.Metadata[pubsub.MetaDeadReason] == "" {
		t.Errorf("dead letter %+v", got)
	}
}

func TestCompareStreamIDs(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"0-0", "0-0", 0},
		{"1-0", "0-5", 1},
		{"5-1", "5-10", -1},
		{"10-0", "9-99", 1},
		{"5", "5-0", 0},
		{"x", "0-0", -1},
	}
	for _, tc := range tests {
		if got := compareStreamIDs(tc.a, tc.b); got != tc.want {
			t.Errorf("compareStreamIDs(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// FuzzCodec checks that every publishable Event survives the trip to
// stream fields and back, and that decoding arbitrary fields never panics.
func FuzzCodec(f *testing.F) {
	f.Add("id", "type", "run", []byte(`{"a":1}`), true, "k", "v", int64(1700000000123456789))
	f.Add("", "t", "", []byte(nil), false, "", "", int64(0))
	f.Add("\x00{x}", "\xff", "%7B", []byte("\x00"), true, "traceparent", "00-1-2-01", int64(-1))
	f.Fuzz(func(t *testing.T, id, typ, run string, data []byte, hasData bool, mk, mv string, nanos int64) {
		e := pubsub.Event{ID: id, Type: typ, RunID: run}
		if hasData {
			e.Data = json.RawMessage(data)
			if e.Data == nil {
				e.Data = json.RawMessage{}
			}
		}
		if mk != "" || mv != "" {
			e.Metadata = map[string]string{mk: mv}
		}
		if nanos != 0 {
			e.CreatedAt = time.Unix(0, nanos)
		}
		// Decoding anything must not panic.
		_, _ = decodeEvent(map[string]any{"v": "1", "id": id, "type": typ, "meta": mk, "created": mv, "data": run})

		fields, _, err := encodeEvent(e)
		if err != nil {
			if !errors.Is(err, pubsub.ErrInvalid) {
				t.Fatalf("encode error %v does not wrap ErrInvalid", err)
			}
			return // metadata that is not UTF-8: refused at Publish
		}
		got, err := decodeEvent(codecFields(t, fields))
		if id == "" || typ == "" {
			if err == nil {
				t.Fatalf("decoded an event without id or type: %+v", got)
			}
			return // Publish never writes these (PrepareEvent fills ID, rejects empty Type)
		}
		if err != nil {
			t.Fatalf("decode of %q: %v", fields, err)
		}
		if !codecEqual(got, e) {
			t.Fatalf("round trip got %+v, want %+v", got, e)
		}
	})
}
