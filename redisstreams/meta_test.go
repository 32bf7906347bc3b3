package redisstreams

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

// TestDecodeMetaFastPath: the metadata encodeEvent writes for plain keys
// and values (what the signals runtime and most callers put there) takes
// the fast path, and decodes to the same map as json.Unmarshal.
func TestDecodeMetaFastPath(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"a": ""},
		{"leasebus.signals.thread": "t-1", "leasebus.signals.id": "3f2c-9a", "leasebus.signals.action": "forwarded"},
		{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "ünï": "çødé ✓"},
	} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeMetaFast(string(b))
		if !ok {
			t.Errorf("%s: not decoded by the fast path", b)
			continue
		}
		if !maps.Equal(got, m) {
			t.Errorf("%s: fast path got %v, want %v", b, got, m)
		}
	}
	// Escapes, whitespace, other types and bad syntax are left to
	// json.Unmarshal.
	for _, s := range []string{`{"a":"b\"c"}`, `{ "a":"b"}`, `{"a":1}`, `{"a":"b",}`, `{"a""b"}`, `null`, `{"a":"b"`, "{\"a\":\"\x01\"}"} {
		if _, ok := decodeMetaFast(s); ok {
			t.Errorf("%q: taken by the fast path", s)
		}
	}
}

// FuzzDecodeMeta: whatever the input, decodeMeta agrees with json.Unmarshal
// into a map[string]string (same map, error or not).
func FuzzDecodeMeta(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"a":"b","c":"d"}`, `{"a":"b","a":"c"}`, `{"a":"\u00e9"}`,
		`{"a":"b\"c"}`, `{ "a" : "b" }`, `{"a":1}`, `null`, `{"a":"b",}`, `{"":""}`, "{\"\xff\":\"b\"}", `{"a":"b"}x`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := decodeMeta(s)
		var want map[string]string
		werr := json.Unmarshal([]byte(s), &want)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%q: decodeMeta error %v, json.Unmarshal error %v", s, err, werr)
		}
		if err == nil && !maps.Equal(got, want) {
			t.Fatalf("%q: decodeMeta %v, json.Unmarshal %v", s, got, want)
		}
	})
}

// TestLuaCodeKeepsTheScript: the code sent with every PublishFor is the
// script without its comments, and it is shorter.
func TestLuaCodeKeepsTheScript(t *testing.T) {
	code := luaCode(publishForLua)
	if len(code) >= len(publishForLua) || strings.Contains(code, "--") ||
		!strings.Contains(code, "redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))") {
		t.Errorf("luaCode(publish_for.lua) = %q", code)
	}
}
