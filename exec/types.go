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
	// Outputs are patterns of files to hand back after the run (see
	// ValidatePattern and CollectOutputs).
	Outputs []string
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
	// Files are the working directory's files that matched Job.Outputs,
	// in a stable order; absent when none did or none were asked for.
	Files []OutputFile `json:"files,omitempty"`
	// FilesIncomplete says that some matching file's content is not in
	// Files: over the bounds (listed with Omitted), or not even listed.
	FilesIncomplete bool `json:"files_incomplete,omitempty"`
	// Usage is what the run's processes used, as the kernel counted it.
	Usage Usage `json:"usage"`
}

// LocalID returns a fresh sandbox id for a run outside any pod (the local
// backend, `run --code-file`): 96 random bits, so ids never repeat.
func LocalID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails on Linux (Go 1.24+)
	return "local-" + hex.EncodeToString(b[:])
}
