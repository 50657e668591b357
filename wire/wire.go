// Package wire is the JSON the sandbox service speaks: the request and
// result of POST /v1/execute and POST /v1/call, the error body of every
// non-2xx answer, and the names of a run's outcomes. The service, the
// in-pod runner, exec (which produces results) and the client all use these
// types, so the JSON is declared once. It depends on the standard library
// only and builds on every platform, so that a client on any machine can
// import it.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// ExecuteRequest is the body of POST /v1/execute.
type ExecuteRequest struct {
	Code     string `json:"code"`
	TimeoutS *int   `json:"timeout_s,omitempty"`
	Files    []File `json:"files,omitempty"`
	// Outputs are patterns of files to hand back after the run, relative to
	// the working directory: "*.png", "out/**" (see exec.ValidatePattern).
	Outputs []string `json:"outputs,omitempty"`
}

// File is an input file as sent on the wire. Encoding is "" or
// EncodingUTF8 for text, EncodingBase64 for bytes.
type File struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty"`
}

// FileOf is the wire form of a file with content, by the rule output files
// follow too (EncodeContent): text when it is valid UTF-8, else base64, so
// that every byte survives JSON.
func FileOf(path string, content []byte) File {
	c, enc := EncodeContent(content)
	if enc == EncodingUTF8 {
		enc = "" // the default
	}
	return File{Path: path, Content: c, Encoding: enc}
}

// TimeoutS is d in the whole seconds of timeout_s, rounded up: a job never
// gets less time than it was given.
func TimeoutS(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// ErrorBody is the JSON body of every non-2xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// Marshal is JSON as the service writes it and reads it back: no HTML
// escaping, so code with < and & travels as written, and an HTML file sent
// back is not six times its size. It ends with a newline.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}
