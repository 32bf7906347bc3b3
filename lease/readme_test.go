package lease_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample keeps the README's example identical to the body of
// ExampleKeep, which runs (and checks its output) as a test.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- begin: lease/example_test.go ExampleKeep -->\n```go\n", "```\n<!-- end -->"
	r := string(readme)
	i := strings.Index(r, begin)
	j := strings.Index(r, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no example between %q and %q", begin, end)
	}
	got := r[i+len(begin) : j]

	s := string(src)
	const head = "func ExampleKeep() {\n"
	k := strings.Index(s, head)
	if k < 0 {
		t.Fatal("example_test.go has no ExampleKeep")
	}
	body := s[k+len(head):]
	body = body[:strings.Index(body, "\n}\n")+1]
	var want strings.Builder
	for line := range strings.Lines(body) {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if got != want.String() {
		t.Errorf("README example differs from ExampleKeep; README:\n%s\nExampleKeep:\n%s", got, want.String())
	}
}
