// Command sandbox-failures reads `go test -json` events (or `go tool
// test2json -t` run over a `go test -v` log) and prints, for each failed
// test that has no failed subtest, the last lines of its own output: the
// errors where a reader of a CI log that kept only its tail finds them,
// without the thousands of lines the passing tests logged.
//
//	go tool test2json -t < bin/e2e.log | go run ./cmd/sandbox-failures
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is the part of a test2json event this reads.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	lines := flag.Int("lines", 12, "lines of output shown per failed test, its last")
	width := flag.Int("width", 400, "characters shown per line, its first")
	flag.Parse()
	if err := report(os.Stdin, os.Stdout, *lines, *width); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-failures:", err)
		os.Exit(1)
	}
}

// report writes the failed leaf tests of the events in in to out, in the
// order they failed.
func report(in io.Reader, out io.Writer, lines, width int) error {
	output := map[string][]string{}
	var failed []event
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line test2json passed through, not an event
		}
		switch {
		case ev.Test == "":
		case ev.Action == "output":
			if kept(ev.Output) {
				output[ev.Test] = append(output[ev.Test], strings.TrimRight(ev.Output, "\n"))
			}
		case ev.Action == "fail":
			failed = append(failed, ev)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, ev := range failed {
		if hasFailedSubtest(ev.Test, failed) {
			continue
		}
		fmt.Fprintf(out, "--- FAIL: %s (%.1fs), its last lines:\n", ev.Test, ev.Elapsed)
		got := output[ev.Test]
		for _, l := range got[max(0, len(got)-lines):] {
			if len(l) > width {
				l = strings.ToValidUTF8(l[:width], "") + "…"
			}
			fmt.Fprintln(out, l)
		}
	}
	return nil
}

// kept: the test's own lines, not go test's markers of its progress.
func kept(line string) bool {
	t := strings.TrimSpace(line)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- FAIL", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return false
		}
	}
	return t != ""
}

func hasFailedSubtest(name string, failed []event) bool {
	for _, ev := range failed {
		if strings.HasPrefix(ev.Test, name+"/") {
			return true
		}
	}
	return false
}
