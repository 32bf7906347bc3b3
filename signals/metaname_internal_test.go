package signals

import (
	"testing"
	"unicode/utf8"
)

// TestMetaNameRoundTrip: every name comes back from the metadata that
// carries it, and every such value is valid UTF-8; a valid UTF-8 name is
// carried as itself, also one that starts with 1063a0d's mark "\x00b64:"
// (review h61: a value is never decoded).
func TestMetaNameRoundTrip(t *testing.T) {
	const oldMark = "\x00b64:"
	for _, name := range []string{"", "t-1", "t\x00{a}:b", "\xff", "x\xfe\xff", oldMark, oldMark + "AAAA", oldMark + "!!", oldMark + "\xff", "日本"} {
		md := map[string]string{}
		putName(md, "k", name)
		if got := nameOf(md, "k"); got != name {
			t.Errorf("nameOf(putName(%q)) = %q", name, got)
		}
		cp := map[string]string{}
		copyName(cp, md, "k")
		if got := nameOf(cp, "k"); got != name {
			t.Errorf("nameOf(copyName(putName(%q))) = %q", name, got)
		}
		for k, v := range md {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				t.Errorf("putName(%q) stores %q=%q, not UTF-8", name, k, v)
			}
		}
		if utf8.ValidString(name) && (len(md) != 1 || md["k"] != name) {
			t.Errorf("putName(%q) stores %q, want it unchanged under its key", name, md)
		}
	}
}
