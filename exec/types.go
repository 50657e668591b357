// Package exec runs one Python snippet as a child process tree and reports
// what it did (a wire.Result). It depends on the standard library and wire
// only, so that the pod entrypoint stays small and the guarantees it gives
// can be read in one place.
package exec

import (
	"crypto/rand"
	"encoding/hex"
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
}

// LocalID returns a fresh sandbox id for a run outside any pod (the local
// backend, `run --code-file`): 96 random bits, so ids never repeat.
func LocalID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return "local-" + hex.EncodeToString(b[:])
}
