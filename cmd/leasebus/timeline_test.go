package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// timelineRow draws a and returns the row of thread th (between the bars)
// and the whole drawing.
func timelineRow(t *testing.T, a *analysis, width int, th string) (string, string) {
	t.Helper()
	var out bytes.Buffer
	drawTimeline(&out, a, width)
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == th {
			return strings.Trim(f[1], "|"), out.String()
		}
	}
	t.Fatalf("no row for %s:\n%s", th, out.String())
	return "", ""
}

// Workers 10 and up are drawn as letters, and the legend says which.
func TestTimelineLegendTwelveWorkers(t *testing.T) {
	evs := []ev{
		{0, recBegin, "demo", nil},
		{100, recStart, "w12", []string{"th", "thread-1", "run", "r1", "tok", "1", "sigs", "thread-1/s1"}},
		{400, recEnd, "w12", []string{"th", "thread-1", "run", "r1"}},
		{500, recStart, "w3", []string{"th", "thread-1", "run", "r2", "tok", "2", "sigs", "thread-1/s2"}},
		{800, recEnd, "w3", []string{"th", "thread-1", "run", "r2"}},
		{1000, recStop, "demo", nil},
	}
	a := analyze(records(evs), []string{"thread-1"}, 2*time.Second, 500*time.Millisecond)
	row, all := timelineRow(t, a, 101, "thread-1")
	if !strings.Contains(row, "ccc") || !strings.Contains(row, "333") {
		t.Errorf("row %q, want w12 drawn as c and w3 as 3", row)
	}
	for _, want := range []string{"1-9 worker w1-w9, a-c worker w10-w12 running the thread", "digits and letters = the worker"} {
		if !strings.Contains(all, want) {
			t.Errorf("timeline lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "1-9 worker w1-w9 running") {
		t.Errorf("legend still claims only w1-w9:\n%s", all)
	}
}

func TestWorkerLegend(t *testing.T) {
	for n, want := range map[int]string{
		1: "1 worker w1", 3: "1-3 worker w1-w3", 9: "1-9 worker w1-w9",
		10: "1-9 worker w1-w9, a worker w10", 12: "1-9 worker w1-w9, a-c worker w10-w12", 26: "1-9 worker w1-w9, a-q worker w10-w26",
	} {
		if got := workerLegend(n); got != want {
			t.Errorf("workerLegend(%d) = %q, want %q", n, got, want)
		}
	}
	// No worker letter collides with the other marks.
	for i := 10; i <= 26; i++ {
		if m := workerMark(workerName(i - 1)); strings.ContainsRune(".-xX!R", rune(m)) {
			t.Errorf("w%d is drawn as %c, a mark with another meaning", i, m)
		}
	}
}

// A lease held by a tenure between the end of its run and the start of the
// run it hands the lease to (the linger) is drawn as '-', not as '.' (no
// run): a gap-free hand-off shows no gap. So is the linger before a release.
func TestTimelineLingerIsNotAGap(t *testing.T) {
	evs := []ev{
		{0, recBegin, "demo", nil},
		{0, recObserved, "w1", []string{"ev", "tenure-started", "th", "thread-1", "run", "r1", "tok", "1"}},
		{0, recStart, "w1", []string{"th", "thread-1", "run", "r1", "tok", "1", "sigs", "thread-1/s1"}},
		{300, recDid, "w1", []string{"th", "thread-1", "run", "r1", "sig", "thread-1/s1"}},
		{300, recEnd, "w1", []string{"th", "thread-1", "run", "r1"}},
		{500, recObserved, "w1", []string{"ev", "handed-off", "th", "thread-1", "run", "r2", "tok", "2", "prun", "r1", "ptok", "1"}},
		{500, recStart, "w1", []string{"th", "thread-1", "run", "r2", "tok", "2", "sigs", "thread-1/s2"}},
		{700, recDid, "w1", []string{"th", "thread-1", "run", "r2", "sig", "thread-1/s2"}},
		{700, recEnd, "w1", []string{"th", "thread-1", "run", "r2"}},
		{900, recObserved, "w1", []string{"ev", "released", "th", "thread-1", "run", "r2", "tok", "2"}},
		{1000, recStop, "demo", nil},
	}
	a := analyze(records(evs), []string{"thread-1"}, 2*time.Second, 500*time.Millisecond)
	row, all := timelineRow(t, a, 101, "thread-1") // 10ms a column
	// r1: columns 0-30, linger 31-49, r2: 50-70, linger 71-89, free 90-100.
	want := strings.Repeat("1", 31) + strings.Repeat("-", 19) + strings.Repeat("1", 21) + strings.Repeat("-", 19) + strings.Repeat(".", 11)
	if row != want {
		t.Errorf("row\n%s\nwant\n%s\n%s", row, want, all)
	}
	if !strings.Contains(all, "- lease held between runs (linger before a hand-off or release)") {
		t.Errorf("legend does not explain '-':\n%s", all)
	}
}
