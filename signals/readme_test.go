package signals_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEExample keeps the README's signals snippet identical to the body
// of ExampleRuntime_Send, which runs (and checks its output) as a test.
func TestREADMEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- begin: signals/example_test.go ExampleRuntime_Send -->\n```go\n", "```\n<!-- end -->"
	r := string(readme)
	i := strings.Index(r, begin)
	if i < 0 {
		t.Fatalf("README.md has no snippet after %q", begin)
	}
	j := strings.Index(r[i:], end)
	if j < 0 {
		t.Fatalf("README.md's snippet has no %q", end)
	}
	got := r[i+len(begin) : i+j]

	s := string(src)
	const head = "func ExampleRuntime_Send() {\n"
	k := strings.Index(s, head)
	if k < 0 {
		t.Fatal("example_test.go has no ExampleRuntime_Send")
	}
	body := s[k+len(head):]
	body = body[:strings.Index(body, "\n}\n")+1]
	var want strings.Builder
	for line := range strings.Lines(body) {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if got != want.String() {
		t.Errorf("README snippet differs from ExampleRuntime_Send; README:\n%s\nExampleRuntime_Send:\n%s", got, want.String())
	}
}
