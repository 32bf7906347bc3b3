// Package readmetest keeps the README's code snippets identical to the
// Example functions they are copied from, so that a snippet is always code
// that compiles and runs as a test.
package readmetest

import (
	"os"
	"strings"
	"testing"
)

// Match fails t unless README.md (at readme) holds, between
// "<!-- begin: <pkg>/example_test.go <example> -->\n```go\n" and
// "```\n<!-- end -->", exactly the body of func <example>() in
// example_test.go of the calling package, unindented by one tab.
func Match(t *testing.T, readme, pkg, example string) {
	t.Helper()
	rb, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- begin: "+pkg+"/example_test.go "+example+" -->\n```go\n", "```\n<!-- end -->"
	r := string(rb)
	i := strings.Index(r, begin)
	if i < 0 {
		t.Fatalf("README.md has no snippet after %q", begin)
	}
	j := strings.Index(r[i:], end)
	if j < 0 {
		t.Fatalf("README.md's snippet of %s has no %q", example, end)
	}
	got := r[i+len(begin) : i+j]

	s := string(src)
	head := "func " + example + "() {\n"
	k := strings.Index(s, head)
	if k < 0 {
		t.Fatalf("example_test.go has no %s", example)
	}
	body := s[k+len(head):]
	body = body[:strings.Index(body, "\n}\n")+1]
	var want strings.Builder
	for line := range strings.Lines(body) {
		want.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if got != want.String() {
		t.Errorf("README snippet differs from %s; README:\n%s\n%s:\n%s", example, got, example, want.String())
	}
}
