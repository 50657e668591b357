package wire

import "encoding/json"

// CallRequest is the body of POST /v1/call.
type CallRequest struct {
	Image    string            `json:"image"`
	Function string            `json:"function"`
	Args     json.RawMessage   `json:"args,omitempty"`
	Kwargs   json.RawMessage   `json:"kwargs,omitempty"`
	TimeoutS *int              `json:"timeout_s,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// Kinds of CallError.
const (
	// CallRaised: the function raised an exception.
	CallRaised = "raised"
	// CallImport: the module could not be imported or the attribute path
	// did not resolve to something callable.
	CallImport = "import"
	// CallUnserializable: the function returned a value JSON cannot hold.
	CallUnserializable = "unserializable"
	// CallTooLarge: the return value, as JSON, does not fit in the answer.
	CallTooLarge = "result_too_large"
	// CallNoResult: the process ended without reporting a value or an
	// exception (os._exit, a signal, the interpreter failing to start).
	CallNoResult = "no_result"
)

// CallError says why a call has no result. Type, Message and Traceback are
// the exception's when Kind is CallRaised or CallImport; for the other kinds
// Type names the kind in Python's spelling so that clients that show
// "Type: message" read well.
type CallError struct {
	Kind      string `json:"kind"`
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// CallResult is the body of a 200 answer to POST /v1/call: the call ran,
// whether the function returned (Result), raised (Error) or was killed.
// Result is JSON null whenever Error is set or the run ended without a
// value. The process's fields follow the call's own, as an execution's
// follow its sandbox id.
type CallResult struct {
	SandboxID string `json:"sandbox_id"`
	// RequestID is as in Result.
	RequestID string          `json:"request_id,omitempty"`
	Result    json.RawMessage `json:"result"`
	Error     *CallError      `json:"error,omitempty"`
	Process
}
