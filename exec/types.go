// Package exec runs one Python snippet as a child process tree and reports
// what it did. It depends on the standard library only, so that the pod
// entrypoint stays small and the guarantees it gives can be read in one place.
package exec

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// File is an input file written into the working directory before a run.
type File struct {
	// Path is relative to the working directory; see ValidatePath.
	Path    string
	Content []byte
}

// Job is one snippet to run, already validated.
type Job struct {
	Code    string
	Timeout time.Duration
	Files   []File
}

// Result is what a run produced. Its JSON form is the API's response body.
type Result struct {
	SandboxID       string `json:"sandbox_id"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        int    `json:"exit_code"`
	DurationMS      int64  `json:"duration_ms"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	TimedOut        bool   `json:"timed_out"`
	OOMKilled       bool   `json:"oom_killed"`
}

// LocalID returns a fresh sandbox id for a run outside any pod (the local
// backend, `run --code-file`): 96 random bits, so ids never repeat.
func LocalID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return "local-" + hex.EncodeToString(b[:])
}
