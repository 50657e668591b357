package api

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandbox/wire"
)

// WriteJSON writes v as the JSON body of an answer with status. A value
// that cannot be encoded becomes a 500 with an error body. <, > and & are
// not escaped: the answer is JSON with nosniff, never HTML, and escaping
// them would make an HTML file sent back six times its size.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := wire.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(wire.ErrorBody{Error: err.Error()})
		body = append(body, '\n')
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}

// WriteError writes the JSON error body every non-2xx answer carries.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, wire.ErrorBody{Error: msg})
}

// Write answers with e: its status, its Retry-After when set, its message.
func (e *Error) Write(w http.ResponseWriter) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	WriteError(w, e.Status, e.Msg)
}

// AsError returns the *Error in err's chain when it names an HTTP error
// status (4xx or 5xx).
func AsError(err error) (*Error, bool) {
	var ae *Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status <= 599 {
		return ae, true
	}
	return nil, false
}

// ErrorOf reads a non-2xx answer's {"error": ...} message, or the first
// few KiB of whatever else it holds, or its status line when it is empty:
// what a client of a runner or of the service reports as the cause.
func ErrorOf(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var eb wire.ErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		return eb.Error
	}
	if len(b) == 0 {
		return resp.Status
	}
	return string(b)
}
