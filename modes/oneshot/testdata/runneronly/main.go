// Command runneronly is `sandbox run --code-file` and nothing else: package
// oneshot's init answers that command line before main runs. It links only
// the runner and kong, so BenchmarkRunOverhead builds it to show what a
// separate runner binary would cost beside the one sandbox binary, which also
// links client-go.
package main

import (
	"os"

	_ "github.com/sandboxd/sandbox/modes/oneshot"
)

func main() {
	os.Stderr.WriteString("usage: runneronly run --code-file FILE\n")
	os.Exit(2)
}
