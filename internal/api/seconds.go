package api

import (
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/wire"
)

// wholeSeconds is timeout_s as requests may send it: a JSON number whose
// value is whole, 10 or 10.0 alike (several SDKs send every number as a
// float). 10.5 is refused rather than rounded either way.
type wholeSeconds int

// maxSeconds bounds what a whole number of seconds may be before validJob
// checks the range: enough for any limit, far from int overflow.
const maxSeconds = 1 << 30

func (s *wholeSeconds) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || b[0] == '"' {
		return Errorf(http.StatusBadRequest, "field \"timeout_s\": expected a whole number of seconds, got %s", b)
	}
	if f != math.Trunc(f) || math.Abs(f) > maxSeconds {
		return Errorf(http.StatusBadRequest, "field \"timeout_s\": %s is not a whole number of seconds", b)
	}
	*s = wholeSeconds(f)
	return nil
}

// executeRequest is wire.ExecuteRequest with timeout_s as wholeSeconds:
// the outer field is the one encoding/json fills.
type executeRequest struct {
	wire.ExecuteRequest
	TimeoutS *wholeSeconds `json:"timeout_s,omitempty"`
}

// callRequest is wire.CallRequest likewise.
type callRequest struct {
	wire.CallRequest
	TimeoutS *wholeSeconds `json:"timeout_s,omitempty"`
}

// wireField is a field's path as the client wrote it: encoding/json names
// the fields of the embedded wire request through its type's name.
func wireField(path string) string {
	for _, embedded := range []string{"ExecuteRequest.", "CallRequest."} {
		path = strings.TrimPrefix(path, embedded)
	}
	return path
}

// seconds is the *int of wire's requests.
func (s *wholeSeconds) seconds() *int {
	if s == nil {
		return nil
	}
	n := int(*s)
	return &n
}
