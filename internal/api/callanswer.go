package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandbox/wire"
)

// minStream is the least of each stream an answer keeps when it must shrink
// them to fit: enough for the start and the end of a traceback.
const minStream = 16 << 10

// EncodeCallResult returns the JSON of r, at most max bytes (MaxCallAnswer
// when max is 0). The return value is never cut: a JSON value with a piece
// missing is not that value. When the answer is too large, stdout and stderr
// are cut first (head and tail kept, a marker line where bytes were dropped,
// *_truncated set), as the runner cuts them anyway; if the return value
// still does not fit, it is dropped and Error says so, with its size. The
// returned result is what was encoded.
func EncodeCallResult(r wire.CallResult, limit int) ([]byte, wire.CallResult, error) {
	if limit <= 0 {
		limit = MaxCallAnswer
	}
	if len(r.Result) == 0 && r.Error == nil {
		r.Result = json.RawMessage("null")
	}
	b, err := encodeCall(r)
	if err != nil {
		return nil, r, err
	}
	if len(b) <= limit {
		return b, r, nil
	}
	// Room for the streams once everything else is in.
	outer := r
	outer.Stdout, outer.Stderr = "", ""
	ob, err := encodeCall(outer)
	if err != nil {
		return nil, r, err
	}
	if len(ob)+2*6*minStream+2*markerRoom > limit {
		// The value alone leaves no room: it goes, and the error says why.
		size := len(r.Result)
		r.Result = json.RawMessage("null")
		r.Error = &wire.CallError{
			Kind: wire.CallTooLarge,
			Type: "ResultTooLarge",
			Message: fmt.Sprintf("the return value is %d bytes of JSON, over what an answer can carry (%d bytes in all); "+
				"return less, or write it somewhere the agent can fetch it", size, limit),
		}
		if b, err = encodeCall(r); err != nil || len(b) <= limit {
			return b, r, err
		}
		outer = r
		outer.Stdout, outer.Stderr = "", ""
		if ob, err = encodeCall(outer); err != nil {
			return nil, r, err
		}
	}
	// Share the room between the streams by their escaped size, halving
	// the larger until both fit: escaping is uneven (a control byte costs
	// six), so measure rather than compute.
	room := limit - len(ob)
	out, errs := r.Stdout, r.Stderr
	keepOut, keepErr := len(out), len(errs)
	for range 64 {
		so, se := escapedLen(r.Stdout), escapedLen(r.Stderr)
		if so+se <= room {
			break
		}
		switch {
		case (so >= se || keepErr <= minStream) && keepOut > minStream:
			keepOut = max(minStream, keepOut/2)
			r.Stdout, r.StdoutTruncated = clipStream(out, keepOut, "stdout"), true
		case keepErr > minStream:
			keepErr = max(minStream, keepErr/2)
			r.Stderr, r.StderrTruncated = clipStream(errs, keepErr, "stderr"), true
		}
	}
	b, err = encodeCall(r)
	if err == nil && len(b) > limit {
		err = fmt.Errorf("call answer: %d bytes after cutting the streams, over %d", len(b), limit)
	}
	return b, r, err
}

// markerRoom is what a clipStream marker line costs.
const markerRoom = 128

// encodeCall is wire.Marshal, which leaves <, > and & as they are: the
// return value is raw JSON from the tool, and escaping them would grow it
// (six bytes each) after it was measured.
func encodeCall(r wire.CallResult) ([]byte, error) { return wire.Marshal(r) }

func escapedLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// clipStream keeps about keep bytes of s, its head and its tail, with a
// marker line where the middle was dropped, cut on rune boundaries.
func clipStream(s string, keep int, stream string) string {
	if len(s) <= keep {
		return s
	}
	h := keep / 2
	t := keep - h
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	ts := len(s) - t
	for ts < len(s) && !utf8.RuneStart(s[ts]) {
		ts++
	}
	var b strings.Builder
	b.WriteString(s[:h])
	if h > 0 && s[h-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "[sandbox: %d bytes of %s dropped here to keep the answer within its limit]\n", ts-h, stream)
	b.WriteString(s[ts:])
	return b.String()
}

// WriteCallResult answers a call with r, kept within MaxCallAnswer.
func WriteCallResult(w http.ResponseWriter, r wire.CallResult) wire.CallResult {
	b, r, err := EncodeCallResult(r, MaxCallAnswer)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err.Error())
		return r
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	return r
}
