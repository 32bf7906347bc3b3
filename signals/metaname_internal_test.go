package signals

import (
	"testing"
	"unicode/utf8"
)

// TestMetaNameRoundTrip: every name comes back from the metadata value that
// carries it, and every such value is valid UTF-8; a valid UTF-8 name is
// carried as itself unless it starts with the mark.
func TestMetaNameRoundTrip(t *testing.T) {
	for _, name := range []string{"", "t-1", "t\x00{a}:b", "\xff", "x\xfe\xff", metaBytesMark, metaBytesMark + "AAAA", metaBytesMark + "!!", "日本"} {
		v := metaName(name)
		if got := nameOf(map[string]string{"k": v}, "k"); got != name {
			t.Errorf("nameOf(metaName(%q)) = %q", name, got)
		}
		if !utf8.ValidString(v) {
			t.Errorf("metaName(%q) = %q, not UTF-8", name, v)
		}
	}
	if v := metaName("t-1"); v != "t-1" {
		t.Errorf("metaName(%q) = %q, want it unchanged", "t-1", v)
	}
}
