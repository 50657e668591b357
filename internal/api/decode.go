package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Limits on input files: the runner's own (see exec.MaxFiles and
// exec.MaxFilesBytes for why these numbers). Decode checks them up front so
// that a request over them is a 400 naming the limit and nothing runs.
const (
	MaxFiles      = exec.MaxFiles
	MaxFilesBytes = exec.MaxFilesBytes
)

// Decode reads one ExecuteRequest from r and returns the validated job. Every
// error it returns is an *Error whose message names the problem: 400 for bad
// input, 413 when r is an http.MaxBytesReader that hit its limit.
func Decode(r io.Reader) (exec.Job, error) {
	var raw bytes.Buffer // the body again, for checkKeys; the decoder reads it all anyway
	dec := json.NewDecoder(io.TeeReader(r, &raw))
	dec.DisallowUnknownFields()
	var in executeRequest
	if err := dec.Decode(&in); err != nil {
		return exec.Job{}, decodeError(err)
	}
	req := in.ExecuteRequest
	req.TimeoutS = in.TimeoutS.seconds()
	// One JSON value per body: "{...}{...}" or "{...} x" is a client bug
	// that would otherwise be silently half-read.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil || isSyntax(err) {
			return exec.Job{}, Errorf(http.StatusBadRequest,
				"malformed JSON: unexpected data after the request object at byte offset %d", dec.InputOffset())
		}
		return exec.Job{}, decodeError(err)
	}
	if err := checkUnicode(raw.Bytes()); err != nil {
		return exec.Job{}, err
	}
	if err := checkKeys(raw.Bytes()); err != nil {
		var ae *Error
		if !errors.As(err, &ae) {
			err = decodeError(err) // not expected: the body has just parsed
		}
		return exec.Job{}, err
	}
	return validJob(&req)
}

// Validate checks a request that came in another envelope than a body of
// its own (the MCP tool's arguments) exactly as Decode checks a body: it is
// encoded as a client would send it, and refused with a 413 over maxBody,
// so that the same request gets the same answer whichever door it took.
func Validate(req wire.ExecuteRequest, maxBody int64) (exec.Job, error) {
	body, err := wire.Marshal(req)
	if err != nil {
		return exec.Job{}, Errorf(http.StatusBadRequest, "malformed request: %v", err)
	}
	if int64(len(body)) > maxBody {
		return exec.Job{}, Errorf(http.StatusRequestEntityTooLarge,
			"request too large: %d bytes as JSON, the limit is %d bytes: send less code or smaller files", len(body), maxBody)
	}
	return Decode(bytes.NewReader(body))
}

// Field names of the request and of a file, exactly as spelled on the wire.
var (
	requestKeys = map[string]bool{"code": true, "timeout_s": true, "files": true, "outputs": true}
	fileKeys    = map[string]bool{"path": true, "content": true, "encoding": true}
)

// checkKeys refuses what encoding/json lets through: field names in another
// case ("Code" fills Code) and a field given twice (the last would win).
// data is known to be one valid JSON value.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	return walkObject(dec, requestKeys, "", func(key string) error {
		if key != "files" {
			return nil
		}
		if tok, _ := dec.Token(); tok != json.Delim('[') {
			return nil // null: the struct decode has accepted it
		}
		for i := 0; dec.More(); i++ {
			if err := walkObject(dec, fileKeys, fmt.Sprintf("files[%d].", i), nil); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	})
}

// walkObject reads one value from dec; when it is an object it checks each
// key against allowed and lets value read the value of the keys it wants
// (returning nil without reading lets walkObject skip it).
func walkObject(dec *json.Decoder, allowed map[string]bool, prefix string, value func(key string) error) error {
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return err // null, or a value the struct decode has already refused
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		switch {
		case !allowed[key]:
			return Errorf(http.StatusBadRequest, "unknown field %q: field names are lower case: %s", prefix+key, keyList(allowed))
		case seen[key]:
			return Errorf(http.StatusBadRequest, "field %q given twice", prefix+key)
		}
		seen[key] = true
		before := dec.InputOffset()
		if value != nil {
			if err := value(key); err != nil {
				return err
			}
		}
		if dec.InputOffset() == before {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // '}'
	return err
}

func keyList(allowed map[string]bool) string {
	keys := make([]string, 0, len(allowed))
	for k := range allowed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// validJob validates the request and converts it into an exec.Job.
func validJob(req *wire.ExecuteRequest) (exec.Job, error) {
	if req.Code == "" {
		return exec.Job{}, Errorf(http.StatusBadRequest, `missing code: "code" must be a non-empty string of Python source`)
	}
	// The interpreter refuses source with NUL bytes anyway; say so up front
	// rather than as a confusing run failure.
	if strings.IndexByte(req.Code, 0) >= 0 {
		return exec.Job{}, Errorf(http.StatusBadRequest, "code contains a NUL byte")
	}
	timeoutS := DefaultTimeoutS
	if req.TimeoutS != nil {
		timeoutS = *req.TimeoutS
		if timeoutS < 1 || timeoutS > MaxTimeoutS {
			return exec.Job{}, Errorf(http.StatusBadRequest,
				"timeout_s %d out of range: must be from 1 to %d seconds", timeoutS, MaxTimeoutS)
		}
	}
	files, err := decodeFiles(req.Files)
	if err != nil {
		return exec.Job{}, err
	}
	if err := checkOutputs(req.Outputs); err != nil {
		return exec.Job{}, err
	}
	return exec.Job{Code: req.Code, Timeout: time.Duration(timeoutS) * time.Second, Files: files,
		Outputs: req.Outputs}, nil
}

// checkOutputs refuses output patterns the runner would.
func checkOutputs(patterns []string) error {
	if err := exec.CheckOutputs(patterns); err != nil {
		return Errorf(http.StatusBadRequest, "%v", err)
	}
	return nil
}

func decodeFiles(in []wire.File) ([]exec.File, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if len(in) > MaxFiles {
		return nil, Errorf(http.StatusBadRequest, "too many files: %d, at most %d", len(in), MaxFiles)
	}
	out := make([]exec.File, 0, len(in))
	seen := make(map[string]int, len(in))
	total := 0
	for i, f := range in {
		if err := wire.ValidatePath(f.Path); err != nil {
			return nil, Errorf(http.StatusBadRequest, "files[%d]: %v", i, err)
		}
		var content []byte
		switch f.Encoding {
		case "", wire.EncodingUTF8:
			content = []byte(f.Content)
		case wire.EncodingBase64:
			b, err := base64.StdEncoding.DecodeString(f.Content)
			if err != nil {
				return nil, Errorf(http.StatusBadRequest, "files[%d] (%q): content is not valid base64: %v", i, f.Path, err)
			}
			content = b
		default:
			return nil, Errorf(http.StatusBadRequest, "files[%d] (%q): unknown encoding %q: use %q or %q",
				i, f.Path, f.Encoding, wire.EncodingUTF8, wire.EncodingBase64)
		}
		total += len(content)
		if total > MaxFilesBytes {
			return nil, Errorf(http.StatusBadRequest, "files too large: more than %d bytes in total", MaxFilesBytes)
		}
		// Two files with the same path, or one file under another, cannot
		// both be written; catch it here so that nothing runs. ValidatePath
		// has made paths canonical (no ".", "..", or empty components).
		if j, ok := seen[f.Path]; ok {
			return nil, Errorf(http.StatusBadRequest, "files[%d]: path %q already given by files[%d]", i, f.Path, j)
		}
		seen[f.Path] = i
		out = append(out, exec.File{Path: f.Path, Content: content})
	}
	for p, i := range seen {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if j, ok := seen[dir]; ok {
				return nil, Errorf(http.StatusBadRequest, "files[%d]: path %q is inside files[%d] (%q), which is a file",
					i, in[i].Path, j, in[j].Path)
			}
		}
	}
	return out, nil
}

// decodeError turns an error from json.Decoder.Decode into an *Error that
// names the problem.
func decodeError(err error) error {
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	if ae, ok := AsError(err); ok {
		return ae // a field's own check (wholeSeconds)
	}
	switch {
	case errors.As(err, &tooLarge):
		return Errorf(http.StatusRequestEntityTooLarge, "request body too large: the limit is %d bytes", tooLarge.Limit)
	case errors.Is(err, io.EOF):
		return Errorf(http.StatusBadRequest, `empty body: expected a JSON object such as {"code": "print(1)"}`)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syntax):
		return Errorf(http.StatusBadRequest, "malformed JSON at byte offset %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return Errorf(http.StatusBadRequest, "the body must be a JSON object, not %s", typ.Value)
		}
		// Field names no list item ("files.content"): the offset finds it.
		return Errorf(http.StatusBadRequest, "field %q: expected %s, got %s (the value ending at byte offset %d)", wireField(typ.Field), jsonType(typ.Type.String()), typ.Value, typ.Offset)
	}
	// encoding/json reports unknown fields only as text.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return Errorf(http.StatusBadRequest, "unknown field %s: the fields are code, timeout_s, files (path, content, encoding) and outputs", name)
	}
	if !strings.HasPrefix(err.Error(), "json: ") {
		// The reader's own error: the client went away or sent a broken
		// chunked body. Still the request's fault, not the service's.
		return Errorf(http.StatusBadRequest, "read request body: %v", err)
	}
	return Errorf(http.StatusBadRequest, "malformed request: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func isSyntax(err error) bool {
	var syntax *json.SyntaxError
	return errors.As(err, &syntax)
}

// jsonType names a Go type the way a JSON client thinks of it.
func jsonType(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case strings.HasPrefix(goType, "int"), goType == "*int":
		return "an integer"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "wire.") || strings.HasPrefix(goType, "struct"):
		return "an object"
	}
	return goType
}

// FromJob is the inverse of Decode: it builds the request that makes an
// in-pod runner run the same job.
func FromJob(job exec.Job) wire.ExecuteRequest {
	req := wire.ExecuteRequest{Code: job.Code}
	if job.Timeout > 0 {
		s := wire.TimeoutS(job.Timeout)
		req.TimeoutS = &s
	}
	if len(job.Files) > 0 {
		req.Files = make([]wire.File, len(job.Files))
		for i, f := range job.Files {
			req.Files[i] = wire.FileOf(f.Path, f.Content)
		}
	}
	req.Outputs = job.Outputs
	return req
}
