package main

import (
	"bytes"
	"context"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `audit:    [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
mailer:   [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
billing:  [order.created#1(attempt 1) order.created#2(attempt 1) order.created#3(attempt 1)]
shipping: [order.created#1(attempt 1) order.created#2(attempt 1) order.created#2(attempt 2) order.created#3(attempt 1)]
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
