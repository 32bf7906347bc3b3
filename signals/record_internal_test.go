package signals

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRecordFormat(t *testing.T) {
	rec := recordAdd("", []string{"a", "b", "a"}, nil)
	if !strings.HasPrefix(rec, recordPrefix) || len(recordEntries(rec)) != 2 {
		t.Fatalf("recordAdd = %q, want r2 with 2 entries", rec)
	}
	for _, id := range []string{"a", "b"} {
		if !recordHas(rec, id) {
			t.Errorf("recordHas(%q) = false", id)
		}
	}
	if recordHas(rec, "c") {
		t.Error(`recordHas("c") = true`)
	}
	if again := recordAdd(rec, []string{"b"}, nil); again != rec {
		t.Errorf("adding a present id changed %q to %q", rec, again)
	}
}

func TestRecordBounded(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	var ids []string
	for i := range 3 * DedupeEntries {
		ids = append(ids, long+string(rune('a'+i%26))+strings.Repeat("y", i))
	}
	rec := recordAdd("", ids, nil)
	if n := len(recordEntries(rec)); n != DedupeEntries {
		t.Fatalf("%d entries, want %d", n, DedupeEntries)
	}
	if max := len(recordPrefix) + DedupeEntries*(hashLen+1); len(rec) > max {
		t.Fatalf("record of %d bytes, want at most %d", len(rec), max)
	}
	if !recordHas(rec, ids[len(ids)-1]) || recordHas(rec, ids[0]) {
		t.Fatal("record does not keep the newest entries")
	}
}

// TestRecordReadsV1: a record an older version wrote (r1, 48-bit FNV) is
// still honoured, and its entries are carried into the r2 record written
// next, where they age out like others.
func TestRecordReadsV1(t *testing.T) {
	old := recordPrefixV1 + legacyIDHash("old1") + "," + legacyIDHash("old2")
	if !recordHas(old, "old1") || !recordHas(old, "old2") || recordHas(old, "new") {
		t.Fatalf("r1 record %q not read as before", old)
	}
	rec := recordAdd(old, []string{"new"}, nil)
	if !strings.HasPrefix(rec, recordPrefix) {
		t.Fatalf("recordAdd(r1) = %q, want the r2 format", rec)
	}
	for _, id := range []string{"old1", "old2", "new"} {
		if !recordHas(rec, id) {
			t.Errorf("after the upgrade recordHas(%q) = false in %q", id, rec)
		}
	}
	var more []string
	for i := range DedupeEntries {
		more = append(more, strings.Repeat("n", i+1))
	}
	rec = recordAdd(rec, more, nil)
	if recordHas(rec, "old1") || recordHas(rec, "old2") {
		t.Errorf("legacy entries did not age out of %d newer IDs", DedupeEntries)
	}
}

// TestDoneCacheUnambiguous: the local cache compares pairs by value.
func TestDoneCacheUnambiguous(t *testing.T) {
	var c doneCache
	c.add("a\x00b", "c")
	if c.has("a", "b\x00c") {
		t.Fatal(`("a", "b\x00c") found after adding ("a\x00b", "c")`)
	}
	if !c.has("a\x00b", "c") {
		t.Fatal("added pair not found")
	}
	c.add("", "")
	if !c.has("", "") {
		t.Fatal("empty pair not found")
	}
}

// TestDoneCacheBounded: the cache keeps the newest doneCacheSize pairs and
// forgets older ones, first in first out.
func TestDoneCacheBounded(t *testing.T) {
	var c doneCache
	for i := range doneCacheSize + 10 {
		c.add("t", strconv.Itoa(i))
	}
	if len(c.set) != doneCacheSize {
		t.Fatalf("cache holds %d pairs, want %d", len(c.set), doneCacheSize)
	}
	for i := range 10 {
		if c.has("t", strconv.Itoa(i)) {
			t.Fatalf("pair %d still found after %d newer ones", i, doneCacheSize)
		}
	}
	for _, i := range []int{10, doneCacheSize, doneCacheSize + 9} {
		if !c.has("t", strconv.Itoa(i)) {
			t.Fatalf("pair %d not found", i)
		}
	}
	c.add("t", strconv.Itoa(doneCacheSize+9)) // again: not a second entry
	if len(c.set) != doneCacheSize || !c.has("t", "11") {
		t.Fatal("adding a pair the cache holds evicted another")
	}
}

// TestRecordHasMatchesEntries: recordHas, which walks the record in place,
// answers as matching id's entries against recordEntries does, on records
// of both formats with empty, odd-length and foreign entries, and does not
// allocate (a run checks the record for every signal it is given).
func TestRecordHasMatchesEntries(t *testing.T) {
	ref := func(rec, id string) bool {
		h, legacy := idHash(id), legacyIDHash(id)
		for _, e := range recordEntries(rec) {
			if len(e) == hashLen && e == h || len(e) == legacyHashLen && e == legacy {
				return true
			}
		}
		return false
	}
	ids := []string{"a", "b", "sig-1", "", "x,y", "ü"}
	var recs []string
	for _, prefix := range []string{recordPrefix, recordPrefixV1, "r9:", ""} {
		recs = append(recs, prefix, prefix+",", prefix+idHash("a"), prefix+idHash("a")+",,"+legacyIDHash("b"),
			prefix+"short,"+idHash("sig-1")+",", prefix+legacyIDHash("x,y")+","+idHash("ü"), prefix+idHash("")+"x")
	}
	for _, rec := range recs {
		for _, id := range ids {
			if got, want := recordHas(rec, id), ref(rec, id); got != want {
				t.Errorf("recordHas(%q, %q) = %v, want %v", rec, id, got, want)
			}
		}
	}
	rec := recordAdd("", []string{"a", "b", "c"}, nil)
	if n := testing.AllocsPerRun(100, func() { recordHas(rec, "d") }); n != 0 {
		t.Errorf("recordHas allocates %v times per call", n)
	}
}

// TestRecordKeepsDropMarks: the newest recordMarks drop marks stay in the
// record however many signals ran after them (a late DropQueued request
// must find its mark), marks beyond that age out, signals keep their
// DedupeEntries limit, and the record stays bounded.
func TestRecordKeepsDropMarks(t *testing.T) {
	now := time.Now()
	var marks []string
	rec := ""
	for i := range recordMarks + 4 {
		m := newMarkID(now)
		marks = append(marks, m)
		rec = recordAdd(rec, []string{m, "s" + strconv.Itoa(i)}, []string{m})
	}
	var sigs []string
	for i := range 3 * DedupeEntries {
		sigs = append(sigs, "n"+strconv.Itoa(i))
	}
	rec = recordAdd(rec, sigs, nil)
	for i, m := range marks {
		if want := i >= 4; recordHas(rec, m) != want {
			t.Errorf("mark %d of %d: recordHas = %v, want %v", i, len(marks), !want, want)
		}
	}
	if !recordHas(rec, sigs[len(sigs)-1]) || recordHas(rec, sigs[len(sigs)-DedupeEntries-1]) || recordHas(rec, "s0") {
		t.Error("signal entries do not keep the newest DedupeEntries")
	}
	if n := len(recordEntries(rec)); n != DedupeEntries+recordMarks {
		t.Errorf("%d entries, want %d", n, DedupeEntries+recordMarks)
	}
	if max := len(recordPrefix) + DedupeEntries*(hashLen+1) + recordMarks*(hashLen+2); len(rec) > max {
		t.Errorf("record of %d bytes, want at most %d", len(rec), max)
	}
	// A mark is recorded twice: untagged, as the previous version reads
	// it (legacyRecordHas is that version's recordHas), and tagged.
	one := recordAdd("", []string{marks[0]}, []string{marks[0]})
	if e := recordEntries(one); len(e) != 2 || isMark(e[0]) || !isMark(e[1]) {
		t.Errorf("a mark is recorded as %q, want its entry and the same tagged %q", e, string(markTag))
	}
	if !legacyRecordHas(one, marks[0]) {
		t.Error("a process of the previous version does not find a mark recorded now")
	}
	// A signal whose ID looks like a mark's is a signal: it keeps the
	// DedupeEntries limit, not the marks'.
	look := recordAdd("", []string{markPrefix + "t1-user"}, nil)
	if e := recordEntries(look); len(e) != 1 || isMark(e[0]) {
		t.Errorf("a signal with a mark-like ID is recorded as %q, want one untagged entry", e)
	}
}

// legacyRecordHas is recordHas as of 98f4dc7, the version before drop marks
// were tagged: only 22- and 12-character entries match.
func legacyRecordHas(rec, id string) bool {
	for _, e := range recordEntries(rec) {
		switch len(e) {
		case hashLen:
			if e == idHash(id) {
				return true
			}
		case legacyHashLen:
			if e == legacyIDHash(id) {
				return true
			}
		}
	}
	return false
}

func TestMarkTooOld(t *testing.T) {
	now := time.Now()
	window := time.Hour
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{newMarkID(now), false},
		{newMarkID(now.Add(-window/2 + time.Second)), false},
		{newMarkID(now.Add(-window/2 - time.Second)), true},
		{newMarkID(now.Add(time.Minute)), false},                     // its maker's clock is ahead
		{markPrefix + "12345678-aaaa-bbbb-cccc-dddddddddddd", false}, // an older version's mark
		{markPrefix + "tnotanumber-x", false},
		{markPrefix + "t123", false},
		{"user-id", false},
	} {
		if got := markTooOld(tc.id, now, window); got != tc.want {
			t.Errorf("markTooOld(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}
