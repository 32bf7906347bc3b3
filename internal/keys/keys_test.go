package keys

import (
	"strings"
	"testing"
)

func TestSlotKnownValues(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]uint16{
		"foo":           12182,
		"{user1000}.a":  3443,
		"{user1000}.b":  3443,
		"foo{}{bar}":    8363,
		"foo{{bar}}z":   4015,
		"foo{bar}{zap}": 5061,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestKeysOfOneNameShareSlot(t *testing.T) {
	s, err := NewSpace("")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "thread:42", "{x}", "}{", "%7B", "a\x00b", "output.json", "{", "}"} {
		lease, fence := s.Lease(name), s.Fence(name)
		if Slot(lease) != Slot(fence) {
			t.Errorf("name %q: lease %q slot %d, fence %q slot %d", name, lease, Slot(lease), fence, Slot(fence))
		}
		stream, meta := s.Stream(name), s.StreamMeta(name, "groups")
		if Slot(stream) != Slot(meta) {
			t.Errorf("name %q: stream slot %d, meta slot %d", name, Slot(stream), Slot(meta))
		}
		if got := HashTag(lease); got != Escape(name) {
			t.Errorf("name %q: hash tag %q, want %q", name, got, Escape(name))
		}
		if got, ok := s.ParseLease(lease); !ok || got != name {
			t.Errorf("ParseLease(%q) = %q, %v; want %q", lease, got, ok, name)
		}
		if got, ok := s.ParseStream(stream); !ok || got != name {
			t.Errorf("ParseStream(%q) = %q, %v; want %q", stream, got, ok, name)
		}
	}
}

func TestNamesCannotCollideOrEscape(t *testing.T) {
	s, _ := NewSpace("p")
	// Names built to look like other names once braces are involved.
	a, b := s.Lease("x}:lease:{y"), s.Lease("y")
	if a == b || HashTag(a) == HashTag(b) {
		t.Fatalf("distinct names share a key or tag: %q %q", a, b)
	}
	if !strings.HasPrefix(s.Lease("}{"), "p:lease:{") {
		t.Fatalf("prefix escaped: %q", s.Lease("}{"))
	}
	if _, err := NewSpace("a{b}"); err == nil {
		t.Fatal("prefix with braces accepted")
	}
}

func TestLeasePatternEscapesGlob(t *testing.T) {
	s, _ := NewSpace("lb")
	if got, want := s.LeasePattern("job*"), `lb:lease:{job\**}`; got != want {
		t.Fatalf("LeasePattern = %q, want %q", got, want)
	}
	if got, want := s.LeasePattern("{a"), `lb:lease:{%7Ba*}`; got != want {
		t.Fatalf("LeasePattern = %q, want %q", got, want)
	}
}

func TestUnescapeRejectsMalformed(t *testing.T) {
	for _, s := range []string{"%", "%7", "%41", "{", "a}b"} {
		if _, err := Unescape(s); err == nil {
			t.Errorf("Unescape(%q) accepted", s)
		}
	}
}

func FuzzEscapeRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", "{", "}", "%", "%7B", "x}:lease:{y", "a\x00b"} {
		f.Add(s, "pre")
	}
	f.Fuzz(func(t *testing.T, name, prefix string) {
		e := Escape(name)
		if strings.ContainsAny(e, "{}") {
			t.Fatalf("Escape(%q) = %q holds a brace", name, e)
		}
		got, err := Unescape(e)
		if err != nil || got != name {
			t.Fatalf("Unescape(Escape(%q)) = %q, %v", name, got, err)
		}
		// Prefix-preserving both ways.
		if strings.HasPrefix(name, prefix) != strings.HasPrefix(e, Escape(prefix)) {
			t.Fatalf("prefix %q of %q not preserved: %q vs %q", prefix, name, Escape(prefix), e)
		}
	})
}

// BenchmarkEscapeBraces escapes a 64 KiB name of braces, the worst case
// (every byte escaped): review h59 saw a thread of such a name take 5.4s
// to run under -race when Escape formatted each byte with fmt.
func BenchmarkEscapeBraces(b *testing.B) {
	name := strings.Repeat("{", 64<<10)
	b.SetBytes(int64(len(name)))
	for b.Loop() {
		_ = Escape(name)
	}
}
