package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMETourIsReal keeps the README's tour of the command real: every
// console block in it must be a command and its output exactly as
// testdata/tour.sh captured them in testdata/tour.txt. Rerun tour.sh and
// copy the sections after changing the command's output.
func TestREADMETourIsReal(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tour, err := os.ReadFile("testdata/tour.txt")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```console\n(.*?)\n```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 5 {
		t.Fatalf("README has %d console blocks, want the tour's 5 or more", len(blocks))
	}
	for _, b := range blocks {
		if !strings.Contains(string(tour), b[1]+"\n\n") {
			first, _, _ := strings.Cut(b[1], "\n")
			t.Errorf("README block %q is not in testdata/tour.txt as captured; rerun tour.sh and copy it", first)
		}
	}
}
