package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// NotSealed starts every message that says a sandbox pod could not prove
// its egress cut: the runner's refusal of a job and readiness, and serve's
// 503 when its pods stay unproven. The pool recognises a runner's refusal
// by it.
const NotSealed = "the network is not sealed"

// NotSealedError is serve's answer when its sandbox pods cannot prove their
// network sealed, with why: nothing runs on an open network. Like the empty
// pool's 503 it may pass (a policy engine restarting), so it carries
// Retry-After.
func NotSealedError(why string) *Error {
	return &Error{
		Status:     http.StatusServiceUnavailable,
		Msg:        NotSealed + ": " + why,
		RetryAfter: 5 * time.Second,
	}
}

// SealState is the body of a runner's GET /seal: its latest proof that the
// pod's egress is cut, at once, for serve to say why its pods are not Ready.
type SealState struct {
	Sealed    bool      `json:"sealed"`
	Checked   bool      `json:"checked"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	Evidence  string    `json:"evidence"`
}

// ReadSealState asks the runner at addr (host:port) for its SealState.
func ReadSealState(ctx context.Context, hc *http.Client, addr string) (SealState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/seal", nil)
	if err != nil {
		return SealState{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return SealState{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return SealState{}, fmt.Errorf("GET /seal: %d %s", resp.StatusCode, ErrorOf(resp))
	}
	var st SealState
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st); err != nil {
		return SealState{}, fmt.Errorf("GET /seal: %w", err)
	}
	return st, nil
}
