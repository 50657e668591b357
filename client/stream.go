package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/sandboxd/sandbox/wire"
)

// ExecuteStream runs one snippet as Execute does and calls output with its
// output as the snippet writes it: stream is wire.EventStdout or
// wire.EventStderr, text the next piece. Concatenated, a stream's texts are
// what the result's Stdout (Stderr) holds, truncation marker and timeout
// line included, so a caller that prints them need not print the result's
// too (docs/api.md says the one exception). output is called on the
// caller's goroutine, in order, and the answer is not read while it runs.
//
// Its errors are Execute's. An error the service met after the run began
// (the run's pod died, say) comes as an *Error with the status the
// unstreamed answer would have had, and BrokeOff set. Cancelling ctx closes the connection,
// which ends the run. A service that answers with the plain JSON (one from
// before streaming) still works: output then gets the whole of each stream
// at the end.
func (c *Client) ExecuteStream(ctx context.Context, req wire.ExecuteRequest, output func(stream, text string)) (wire.Result, error) {
	body, err := wire.Marshal(req)
	if err != nil {
		return wire.Result{}, err
	}
	hreq, err := c.request(ctx, http.MethodPost, "/v1/execute", body)
	if err != nil {
		return wire.Result{}, err
	}
	hreq.Header.Set("Accept", wire.EventStreamType)
	u := hreq.URL.String()
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return wire.Result{}, err // a *url.Error: it names the method and the URL
	}
	defer resp.Body.Close()
	limited := io.LimitReader(resp.Body, maxResponse+1)
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt != wire.EventStreamType {
		// A refusal before the run, or a service that does not stream: the
		// plain answer.
		data, err := io.ReadAll(limited)
		switch {
		case err != nil:
			return wire.Result{}, fmt.Errorf("POST %s: read answer: %w", u, err)
		case len(data) > maxResponse:
			return wire.Result{}, fmt.Errorf("POST %s: answer over %d bytes", u, maxResponse)
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return wire.Result{}, responseError(resp, data)
		}
		var res wire.Result
		if err := json.Unmarshal(data, &res); err != nil {
			return wire.Result{}, fmt.Errorf("POST %s: answer is not a result: %w", u, err)
		}
		for _, s := range []struct{ name, text string }{{wire.EventStdout, res.Stdout}, {wire.EventStderr, res.Stderr}} {
			if s.text != "" {
				output(s.name, s.text)
			}
		}
		return res, nil
	}
	res, err := readEvents(wire.NewEventReader(limited, maxResponse), output)
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			se.RequestID = resp.Header.Get(requestIDHeader)
			return wire.Result{}, classify(se)
		}
		return wire.Result{}, fmt.Errorf("POST %s: %w", u, err)
	}
	return res, nil
}

// readEvents reads a streamed answer to its result, passing output on; an
// error event is an *Error.
func readEvents(er *wire.EventReader, output func(stream, text string)) (wire.Result, error) {
	for {
		ev, err := er.Next()
		if err == io.EOF {
			return wire.Result{}, errors.New("the answer ended before its result")
		}
		if err != nil {
			return wire.Result{}, fmt.Errorf("read answer: %w", err)
		}
		switch ev.Name {
		case wire.EventStdout, wire.EventStderr:
			var text string
			if err := json.Unmarshal(ev.Data, &text); err != nil {
				return wire.Result{}, fmt.Errorf("%s event is not a JSON string: %w", ev.Name, err)
			}
			output(ev.Name, text)
		case wire.EventResult:
			var res wire.Result
			if err := json.Unmarshal(ev.Data, &res); err != nil {
				return wire.Result{}, fmt.Errorf("answer is not a result: %w", err)
			}
			return res, nil
		case wire.EventError:
			var se wire.StreamError
			if err := json.Unmarshal(ev.Data, &se); err != nil || se.Error == "" {
				return wire.Result{}, fmt.Errorf("error event is not an error: %s", ev.Data)
			}
			if se.Status < 400 || se.Status > 599 {
				se.Status = http.StatusBadGateway
			}
			return wire.Result{}, &Error{StatusCode: se.Status, Message: se.Error, BrokeOff: true}
		}
		// An event of another name is for a newer client: skipped.
	}
}
