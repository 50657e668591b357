package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The streamed form of POST /v1/execute (Accept: text/event-stream) is a
// stream of server-sent events. Each event's data is one line of JSON:
//
//	event: stdout           data: a JSON string, the next piece of the run's stdout
//	event: stderr           data: the same for stderr
//	event: result           data: the Result the unstreamed request answers; the last event
//	event: error            data: a StreamError; the last event, instead of result
//
// Concatenated, a stream's stdout events are the result's stdout (see
// docs/api.md for the one exception). Lines that start with ":" are
// comments, which a reader skips.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventResult = "result"
	EventError  = "error"
)

// EventStreamType is the media type of the streamed answer, as a client
// asks for it in Accept and the answer's Content-Type says it.
const EventStreamType = "text/event-stream"

// StreamError is the data of an error event: the {"error": ...} body an
// unstreamed answer would have carried, with the status it would have had.
type StreamError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// Event is one server-sent event: its name and its data.
type Event struct {
	Name string
	Data []byte
}

// MaxEventBytes bounds one event's lines as EventReader reads them. The
// largest event is a result (api.MaxResultBytes, about 38 MiB, at most);
// a stream that sends more in one event is broken or hostile.
const MaxEventBytes = 64 << 20

// EventReader reads server-sent events from an answer's body.
type EventReader struct {
	r    *bufio.Reader
	max  int
	data bytes.Buffer
}

// NewEventReader reads events from r, each at most max bytes (0:
// MaxEventBytes).
func NewEventReader(r io.Reader, max int) *EventReader {
	if max <= 0 {
		max = MaxEventBytes
	}
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// ErrEventTooLarge is an event over the reader's bound.
var ErrEventTooLarge = errors.New("event over the size limit")

// Next returns the next event. At the end of the stream it returns io.EOF;
// a stream cut in the middle of an event is io.ErrUnexpectedEOF.
func (er *EventReader) Next() (Event, error) {
	var ev Event
	er.data.Reset()
	seen, size := false, 0
	for {
		line, err := er.readLine(&size)
		if err != nil {
			if err == io.EOF && (seen || len(line) > 0) {
				err = io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		switch {
		case len(line) == 0:
			if !seen {
				continue // blank lines between events
			}
			ev.Data = bytes.Clone(er.data.Bytes())
			if ev.Name == "" {
				ev.Name = "message" // the SSE default
			}
			return ev, nil
		case line[0] == ':':
			continue
		}
		seen = true
		field, value, _ := strings.Cut(string(line), ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.Name = value
		case "data":
			if er.data.Len() > 0 {
				er.data.WriteByte('\n')
			}
			er.data.WriteString(value)
		}
	}
}

// readLine reads one line without its end, LF or CRLF (SSE also allows a
// lone CR, which the service never sends), adding its length to *size and failing past the bound.
func (er *EventReader) readLine(size *int) ([]byte, error) {
	var line []byte
	for {
		frag, err := er.r.ReadSlice('\n')
		*size += len(frag)
		if *size > er.max {
			return nil, fmt.Errorf("%w of %d bytes", ErrEventTooLarge, er.max)
		}
		line = append(line, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return line, io.EOF
			}
			return line, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}
