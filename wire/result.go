package wire

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf8"
)

// Process is how a sandboxed process ran: what it printed and how it
// ended. An execution's Result and a tool call's CallResult both carry it,
// each after fields of its own, so it is embedded rather than repeated.
type Process struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        int    `json:"exit_code"`
	DurationMS      int64  `json:"duration_ms"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	TimedOut        bool   `json:"timed_out"`
	OOMKilled       bool   `json:"oom_killed"`
}

// Result is the body of a 200 answer to POST /v1/execute: what a run
// produced.
type Result struct {
	SandboxID string `json:"sandbox_id"`
	// RequestID is serve's name for the request, as in its X-Request-Id
	// header and its log line, so that a caller's log can be joined to
	// serve's. Serve sets it; a runner's result has none.
	RequestID string `json:"request_id,omitempty"`
	Process
	// Files are the working directory's files that matched the request's
	// outputs, in a stable order; absent when none did or none were asked
	// for.
	Files []OutputFile `json:"files,omitempty"`
	// FilesIncomplete says that some matching file's content is not in
	// Files: over the bounds (listed with Omitted), or not even listed.
	FilesIncomplete bool `json:"files_incomplete,omitempty"`
	// Usage is what the run's processes used, as the kernel counted it.
	Usage Usage `json:"usage"`
}

// Usage is what a run's processes used, as the kernel counted it (exec's
// usage.go says how, and what each count leaves out).
type Usage struct {
	// CPUMS is the user and system CPU time of the run's processes.
	CPUMS int64 `json:"cpu_ms"`
	// MaxRSSKiB is the peak resident memory of its largest process.
	MaxRSSKiB int64 `json:"max_rss_kib"`
	// Processes is how many processes and threads it started; 0 where
	// that is not known.
	Processes int64 `json:"processes"`
}

// OutputFile is a file of the working directory that matched the request's
// outputs. Exactly one of three things: its content (Content and Encoding
// set), omitted (over the bounds: Omitted, with its Size), or skipped (not
// a regular file of the run's, never read: Skipped says why).
type OutputFile struct {
	// Path is relative to the working directory, slash-separated.
	Path string `json:"path"`
	// Size is the file's size in bytes; 0 for a skipped entry.
	Size int64 `json:"size"`
	// Content is the file's bytes in Encoding (see EncodeContent).
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	// Omitted: the file is a match, but the bounds had no room for it.
	Omitted bool `json:"omitted,omitempty"`
	// Skipped names why a match was not read: "symlink", "fifo",
	// "socket", "device", "directory", and a few more (see exec's
	// collect.go).
	Skipped string `json:"skipped,omitempty"`
}

// MarshalJSON leaves content and encoding out of an entry that has none,
// so that no client takes an omitted or skipped file for an empty one, and
// leaves HTML characters unescaped, as the answer around it does.
func (f OutputFile) MarshalJSON() ([]byte, error) {
	var v any
	switch {
	case f.Omitted:
		v = struct {
			Path    string `json:"path"`
			Size    int64  `json:"size"`
			Omitted bool   `json:"omitted"`
		}{f.Path, f.Size, true}
	case f.Skipped != "":
		v = struct {
			Path    string `json:"path"`
			Skipped string `json:"skipped"`
		}{f.Path, f.Skipped}
	default:
		type plain OutputFile // without this method
		v = plain(f)
	}
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(b, "\n"), nil
}

// Bytes returns the file's content decoded, or an error when the entry has
// none (omitted or skipped) or its encoding is unknown.
func (f OutputFile) Bytes() ([]byte, error) {
	switch {
	case f.Omitted:
		return nil, fmt.Errorf("%s: omitted (%d bytes, over the bounds)", f.Path, f.Size)
	case f.Skipped != "":
		return nil, fmt.Errorf("%s: skipped (%s)", f.Path, f.Skipped)
	case f.Encoding == EncodingBase64:
		return base64.StdEncoding.DecodeString(f.Content)
	case f.Encoding == EncodingUTF8 || f.Encoding == "":
		return []byte(f.Content), nil
	}
	return nil, fmt.Errorf("%s: unknown encoding %q", f.Path, f.Encoding)
}

// Encodings of file content on the wire.
const (
	EncodingUTF8   = "utf-8"
	EncodingBase64 = "base64"
)

// EncodeContent is the wire form of a file's content: the text itself when
// it is valid UTF-8 and escaping it for JSON does not double it, else
// base64. So every byte survives JSON, text stays readable, and a file of
// control characters (six bytes each once escaped) cannot grow an answer
// more than twofold.
func EncodeContent(b []byte) (content, encoding string) {
	if utf8.Valid(b) && jsonStringLen(b) <= 2*len(b) {
		return string(b), EncodingUTF8
	}
	return base64.StdEncoding.EncodeToString(b), EncodingBase64
}

// jsonStringLen is the length of valid UTF-8 b as the inside of a JSON
// string, as encoding/json writes it without HTML escaping.
func jsonStringLen(b []byte) int {
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
	}
	return n
}
