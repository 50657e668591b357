// Command runneronly is `sandbox run --code-file` and nothing else: package
// oneshot's init answers that command line before main runs. It links only
// the runner, so BenchmarkRunOverhead builds it to show the floor that the
// one sandbox binary, which also links client-go, is measured against.
package main

import (
	"os"

	_ "github.com/sandboxd/sandbox/modes/oneshot"
)

func main() {
	os.Stderr.WriteString("usage: runneronly run --code-file FILE\n")
	os.Exit(2)
}
