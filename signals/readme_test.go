package signals_test

import (
	"testing"

	"github.com/leasebus/leasebus/internal/readmetest"
)

// TestREADMEExample keeps the README's signals snippet identical to the body
// of ExampleRuntime_Send, which runs (and checks its output) as a test.
func TestREADMEExample(t *testing.T) {
	readmetest.Match(t, "../README.md", "signals", "ExampleRuntime_Send")
}
