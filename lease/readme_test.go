package lease_test

import (
	"testing"

	"github.com/leasebus/leasebus/internal/readmetest"
)

// TestREADMEExample keeps the README's example identical to the body of
// ExampleKeep, which runs (and checks its output) as a test.
func TestREADMEExample(t *testing.T) {
	readmetest.Match(t, "../README.md", "lease", "ExampleKeep")
}
