// Package exec runs one Python snippet as a child process tree and reports
// what it did (a wire.Result). It depends on the standard library and wire
// only, so that the pod entrypoint stays small and the guarantees it gives
// can be read in one place.
//
// Running is Linux only: it is made of namespaces, cgroups, seccomp and
// /proc, and lives in the files named *_linux.go. The rest (a Job, its
// limits and the validation of its files and output patterns) builds
// everywhere, for the packages that describe jobs without running them.
package exec

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"
)

// File is an input file written into the working directory before a run.
type File struct {
	// Path is relative to the working directory; see wire.ValidatePath.
	Path    string
	Content []byte
}

// Job is one snippet to run, already validated.
type Job struct {
	Code    string
	Timeout time.Duration
	Files   []File
	// Outputs are patterns of files to hand back after the run (see
	// ValidatePattern and CollectOutputs).
	Outputs []string
	// Output, when set, gets the run's output as it is read, from the
	// moment the job's code may run: stream is wire.EventStdout or
	// wire.EventStderr, text the next piece of it. Concatenated, one
	// stream's texts are the start of that stream in the result; they
	// stop within the first half of the bounded output (the head the
	// result keeps), and what the result has after them (the rest of the
	// head, a marker for what was dropped, the tail, a timeout line) is
	// the caller's to pass on after the run. It is called from the
	// goroutines that read the pipes, the two streams' at once, and must
	// return quickly: the pipe is not read while it runs. It is not
	// called after Run returns.
	Output func(stream, text string)
}

// LocalID returns a fresh sandbox id for a run outside any pod (the local
// backend, `run --code-file`): 96 random bits, so ids never repeat.
func LocalID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return "local-" + hex.EncodeToString(b[:])
}

// TimedOutLine is the line a timed-out run's stderr ends with.
func TimedOutLine(timeout time.Duration) string {
	return "timed out after " + formatSeconds(timeout) + "\n"
}

// formatSeconds writes d in seconds: "2", or "0.5" for a fraction.
func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}
