package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/wire"
)

// Limits of a tool call (POST /v1/call), as the limits table of docs/api.md
// promises them.
const (
	// DefaultCallTimeoutS is a tool call's timeout when the request names
	// none: tools fetch things over the internet, so they get longer than
	// a snippet.
	DefaultCallTimeoutS = 30
	// MaxCallTimeoutS is the longest a tool call may run.
	MaxCallTimeoutS = 120
	// MaxCallAnswer bounds the whole answer to a call (8 MiB): the agent
	// holds it in memory and usually hands it to a model.
	MaxCallAnswer = 8 << 20
	// MaxFunction bounds the function reference; real ones are far shorter.
	MaxFunction = 512
	// MaxEnv bounds the request's environment variables, in count and in
	// bytes (names and values together): enough for configuration, too
	// little to smuggle a payload past the body limit's intent.
	MaxEnv      = 64
	MaxEnvBytes = 64 << 10
	// MaxImage bounds an image reference (Docker's own limit is 255 for the
	// name, plus tag or digest).
	MaxImage = 512
)

// DefaultEnvDeny are the request env names refused by default: names that
// look like credentials, which a tool pod must never be given by an agent
// that holds them. Matching ignores case.
var DefaultEnvDeny = []string{"*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*"}

// Call is a validated tool call: what the in-pod runner needs to make it.
type Call struct {
	Image string
	// Module is the dotted module path, Attr the attribute path inside it
	// ("tools.math" and "Calc.add" for "tools.math:Calc.add").
	Module string
	Attr   string
	// Args is a JSON array, Kwargs a JSON object; both compact, never empty.
	Args    json.RawMessage
	Kwargs  json.RawMessage
	Timeout time.Duration
	Env     map[string]string
	// RequestID is the id of the request that made the call (set by the
	// server, not read from the request): the tool pod's annotation, and
	// so the gateway's log lines, carry it.
	RequestID string
	// Egress is the caller's egress for the image, from its policy entry
	// (package egress's syntax; set by the server, never read from the
	// request): "" leaves the deployment's.
	Egress string
}

// Function is the call's "module:attr" reference.
func (c Call) Function() string { return c.Module + ":" + c.Attr }

var (
	// identPath is a dotted path of ASCII Python identifiers. Non-ASCII
	// identifiers are legal Python but invite look-alike names; tools are
	// named by their developers, who can keep to ASCII.
	identPath  = `[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*`
	functionRE = regexp.MustCompile(`^(` + identPath + `):(` + identPath + `)$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// imageRE is a loose image reference: registry/path:tag or @digest,
	// in the characters references use. The registry decides the rest;
	// this only keeps the value from being anything but a reference.
	imageRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)
	callKeys = map[string]bool{"image": true, "function": true, "args": true, "kwargs": true, "timeout_s": true, "env": true}
)

// DecodeCall reads one CallRequest from r and returns the validated call.
// Every error is an *Error naming the field: 400 for bad input, 413 when r
// is an http.MaxBytesReader that hit its limit. The image allow list and the
// env deny patterns are the deployment's (see CallPolicy), not checked here.
func DecodeCall(r io.Reader) (Call, error) {
	var raw bytes.Buffer
	dec := json.NewDecoder(io.TeeReader(r, &raw))
	dec.DisallowUnknownFields()
	var in callRequest
	if err := dec.Decode(&in); err != nil {
		return Call{}, callDecodeError(err)
	}
	req := in.CallRequest
	req.TimeoutS = in.TimeoutS.seconds()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil || isSyntax(err) {
			return Call{}, Errorf(http.StatusBadRequest,
				"malformed JSON: unexpected data after the request object at byte offset %d", dec.InputOffset())
		}
		return Call{}, callDecodeError(err)
	}
	if err := checkUnicode(raw.Bytes()); err != nil {
		return Call{}, err
	}
	if err := walkObject(json.NewDecoder(bytes.NewReader(raw.Bytes())), callKeys, "", nil); err != nil {
		var ae *Error
		if !errors.As(err, &ae) {
			err = callDecodeError(err)
		}
		return Call{}, err
	}
	return validCall(&req)
}

// callDecodeError is decodeError with the call's field list.
func callDecodeError(err error) error {
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return Errorf(http.StatusBadRequest, "unknown field %s: the fields are %s", name, keyList(callKeys))
	}
	var ae *Error
	if errors.As(decodeError(err), &ae) {
		ae.Msg = strings.Replace(ae.Msg, `{"code": "print(1)"}`, `{"image": "...", "function": "tools.weather:get"}`, 1)
		return ae
	}
	return decodeError(err)
}

// validCall validates the request and converts it into a Call.
func validCall(req *wire.CallRequest) (Call, error) {
	bad := func(format string, args ...any) (Call, error) {
		return Call{}, Errorf(http.StatusBadRequest, format, args...)
	}
	switch {
	case req.Image == "":
		return bad(`missing image: "image" must name the container image the tool is in`)
	case len(req.Image) > MaxImage:
		return bad(`image: %d bytes, at most %d`, len(req.Image), MaxImage)
	case !imageRE.MatchString(req.Image) || strings.Contains(req.Image, "..") || strings.Contains(req.Image, "//"):
		return bad(`image %q is not an image reference (registry/name:tag or name@sha256:...)`, req.Image)
	case req.Function == "":
		return bad(`missing function: "function" must be "package.module:attribute", e.g. "tools.weather:get"`)
	case len(req.Function) > MaxFunction:
		return bad(`function: %d bytes, at most %d`, len(req.Function), MaxFunction)
	}
	m := functionRE.FindStringSubmatch(req.Function)
	if m == nil {
		return bad(`function %q: want a dotted module path, a colon and an attribute path, e.g. "tools.weather:get" or "tools.math:Calc.add"`, req.Function)
	}
	args, err := compactJSON(req.Args, '[', "[]")
	if err != nil {
		return bad(`args: %v`, err)
	}
	kwargs, err := compactJSON(req.Kwargs, '{', "{}")
	if err != nil {
		return bad(`kwargs: %v`, err)
	}
	timeoutS := DefaultCallTimeoutS
	if req.TimeoutS != nil {
		timeoutS = *req.TimeoutS
		if timeoutS < 1 || timeoutS > MaxCallTimeoutS {
			return bad("timeout_s %d out of range: must be from 1 to %d seconds", timeoutS, MaxCallTimeoutS)
		}
	}
	if err := checkEnv(req.Env); err != nil {
		return Call{}, err
	}
	return Call{
		Image:   req.Image,
		Module:  m[1],
		Attr:    m[2],
		Args:    args,
		Kwargs:  kwargs,
		Timeout: time.Duration(timeoutS) * time.Second,
		Env:     req.Env,
	}, nil
}

// compactJSON checks that v is null, absent or a JSON value that opens with
// open, and returns it compact (empty for null or absent).
func compactJSON(v json.RawMessage, open byte, empty string) (json.RawMessage, error) {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(empty), nil
	}
	if t[0] != open {
		want := "an array"
		if open == '{' {
			want = "an object"
		}
		return nil, fmt.Errorf("must be %s, got %s", want, jsonKind(t[0]))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func jsonKind(c byte) string {
	switch {
	case c == '"':
		return "a string"
	case c == '[':
		return "an array"
	case c == '{':
		return "an object"
	case c == 't' || c == 'f':
		return "a boolean"
	}
	return "a number"
}

// checkEnv checks the request's variable names and sizes; the deployment's
// deny patterns come later (CallPolicy).
func checkEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return Errorf(http.StatusBadRequest, "env: %d variables, at most %d", len(env), MaxEnv)
	}
	total := 0
	for _, k := range slices.Sorted(mapKeys(env)) {
		v := env[k]
		if !envNameRE.MatchString(k) {
			return Errorf(http.StatusBadRequest, "env: name %q is not a variable name (letters, digits and _, not starting with a digit)", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(http.StatusBadRequest, "env %q: the value contains a NUL byte", k)
		}
		total += len(k) + len(v)
	}
	if total > MaxEnvBytes {
		return Errorf(http.StatusBadRequest, "env: %d bytes of names and values, at most %d", total, MaxEnvBytes)
	}
	return nil
}

func mapKeys[M ~map[K]V, K comparable, V any](m M) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// CallPolicy is the deployment's say over tool calls: which images may run,
// and which env names a request may not set.
type CallPolicy struct {
	// Images is the allow list: an entry ending in "/" or "*" is a prefix
	// ("registry.example/agents/", "registry.example/agents/weather:*"),
	// any other entry must equal the image exactly. References are compared
	// as written: "python:3" and "docker.io/library/python:3" differ.
	Images []string
	// EnvDeny are glob patterns ("*KEY*") matched, ignoring case, against
	// request env names.
	EnvDeny []string
	// ImagesSetting and EnvDenySetting name the settings in refusals, so an
	// operator reading the error knows what to change.
	ImagesSetting  string
	EnvDenySetting string
	// EgressOf is the deployment's egress of an image, in the syntax of
	// package egress ("none", "internet", a list of names): a caller policy
	// may narrow it, never widen it. nil: not known.
	EgressOf func(image string) string
}

// ValidateImagePatterns checks allow-list entries: non-empty, and a "*"
// only at the end.
func ValidateImagePatterns(images []string) error {
	for _, p := range images {
		if p == "" || p == "*" {
			return fmt.Errorf("image allow list entry %q: name an image or a prefix such as registry.example/agents/", p)
		}
		if i := strings.IndexByte(p, '*'); i >= 0 && i != len(p)-1 {
			return fmt.Errorf("image allow list entry %q: a * may only end a prefix", p)
		}
	}
	return nil
}

// ValidateEnvDeny checks deny patterns are valid globs.
func ValidateEnvDeny(patterns []string) error {
	for _, p := range patterns {
		if p == "" {
			continue // an empty setting: no pattern
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("env deny pattern %q: not a glob pattern", p)
		}
	}
	return nil
}

// ImageAllowed reports whether image matches the allow list.
func (p CallPolicy) ImageAllowed(image string) bool {
	for _, e := range p.Images {
		switch {
		case strings.HasSuffix(e, "*"):
			if strings.HasPrefix(image, strings.TrimSuffix(e, "*")) {
				return true
			}
		case strings.HasSuffix(e, "/"):
			if strings.HasPrefix(image, e) {
				return true
			}
		case image == e:
			return true
		}
	}
	return false
}

// Check refuses a call the deployment does not allow: 403 for an image
// outside the allow list, 400 for a denied env name.
func (p CallPolicy) Check(c Call) error {
	if !p.ImageAllowed(c.Image) {
		return Errorf(http.StatusForbidden, "image %q is not on this service's allow list of tool images (%s)", c.Image, p.ImagesSetting)
	}
	for _, k := range slices.Sorted(mapKeys(c.Env)) {
		up := strings.ToUpper(k)
		for _, pat := range p.EnvDeny {
			if pat == "" {
				continue
			}
			if ok, _ := path.Match(strings.ToUpper(pat), up); ok {
				return Errorf(http.StatusBadRequest, "env %q is refused: it matches the deny pattern %q (%s); credentials must not be passed to tool pods", k, pat, p.EnvDenySetting)
			}
		}
	}
	return nil
}

// CallWire is the body the service sends a tool pod's runner: the validated
// call in the request's own form, so the runner validates it again with
// DecodeCall.
func CallWire(c Call) wire.CallRequest {
	t := wire.TimeoutS(c.Timeout)
	return wire.CallRequest{Image: c.Image, Function: c.Function(), Args: c.Args, Kwargs: c.Kwargs, TimeoutS: &t, Env: c.Env}
}

// MaxCallResult bounds the return value's JSON: the answer's limit less
// room for the envelope and the head and tail of both streams, which are
// cut to make room and never the value (see EncodeCallResult).
const MaxCallResult = MaxCallAnswer - 256<<10
