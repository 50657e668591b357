package mcpserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/sandboxd/sandbox/client"
	"github.com/sandboxd/sandbox/internal/api"
)

// CodeUnavailable is the JSON-RPC error code of a run_python call that did
// not run for want of a sandbox: unreachable, failing (5xx), refusing this
// caller (401, 403) or over its quota (429). It is in the range JSON-RPC
// leaves to servers, apart from the codes the MCP SDKs use.
const CodeUnavailable = -32050

// ErrorData is the data of a CodeUnavailable error, for the agent's host
// (not the model) to act on.
type ErrorData struct {
	// Status is the API's HTTP status, 0 when there was no answer.
	Status int `json:"status,omitempty"`
	// RetryAfterS is the service's Retry-After, in seconds.
	RetryAfterS int `json:"retry_after_s,omitempty"`
	// RequestID names the request in serve's log, when it had one.
	RequestID string `json:"request_id,omitempty"`
}

// refusal is an error from a Runner, as the tool answers it.
type refusal struct {
	status     int
	msg        string
	retryAfter time.Duration
	requestID  string
}

// refusalOf reads the API's status out of err, an *api.Error (an embedded
// backend's) or a *client.Error (a deployment's); status 0 for any other.
func refusalOf(err error) refusal {
	if ae, ok := api.AsError(err); ok {
		return refusal{status: ae.Status, msg: ae.Msg, retryAfter: ae.RetryAfter}
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return refusal{status: ce.StatusCode, msg: ce.Message, retryAfter: ce.RetryAfter, requestID: ce.RequestID}
	}
	return refusal{msg: err.Error()}
}

// modelsFault reports whether the request itself was refused, so that the
// model that wrote it can fix it: a 4xx other than an identity the model
// cannot change (401, 403) or a quota it cannot wait out (429). The Python
// package draws the same line (SandboxRequestError against the rest).
func (r refusal) modelsFault() bool {
	switch r.status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
		return false
	}
	return r.status >= 400 && r.status < 500
}

// toolError is what the model reads of a request the sandbox refused, in
// the Python package's words.
func (r refusal) toolError() string {
	return "error: the sandbox refused the call, nothing ran: " + r.msg
}

// protocolError is the JSON-RPC error of a call that found no sandbox.
func (r refusal) protocolError() *jsonrpc.Error {
	var what string
	switch r.status {
	case http.StatusUnauthorized, http.StatusForbidden:
		what = "the sandbox refused this caller"
	case http.StatusTooManyRequests:
		what = "this caller is over its quota of the sandbox"
	default:
		what = "the sandbox is unavailable"
	}
	msg := fmt.Sprintf("%s, nothing ran: %s", what, r.msg)
	if r.status != 0 {
		msg = fmt.Sprintf("%s, nothing ran: %d %s: %s", what, r.status, http.StatusText(r.status), r.msg)
	}
	data, _ := json.Marshal(ErrorData{Status: r.status, RetryAfterS: int(math.Ceil(r.retryAfter.Seconds())), RequestID: r.requestID})
	return &jsonrpc.Error{Code: CodeUnavailable, Message: msg, Data: data}
}
