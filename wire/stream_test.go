package wire

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestEventReader: events as SSE frames them (several data lines, CRLF,
// comments, blank lines between), the end, a cut, and the size bound.
func TestEventReader(t *testing.T) {
	er := NewEventReader(strings.NewReader("\n: hello\nevent: stdout\ndata: \"a\"\n\ndata: x\r\ndata: y\r\n\r\nevent: result\ndata: {}\n\n"), 0)
	for _, want := range []Event{{"stdout", []byte(`"a"`)}, {"message", []byte("x\ny")}, {"result", []byte("{}")}} {
		ev, err := er.Next()
		if err != nil || ev.Name != want.Name || string(ev.Data) != string(want.Data) {
			t.Fatalf("got %q %q %v, want %q %q", ev.Name, ev.Data, err, want.Name, want.Data)
		}
	}
	if _, err := er.Next(); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
	if _, err := NewEventReader(strings.NewReader("event: result\ndata: {"), 0).Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("cut: %v, want io.ErrUnexpectedEOF", err)
	}
	big := "data: " + strings.Repeat("x", 100<<10) + "\n\n"
	if _, err := NewEventReader(strings.NewReader(big), 64<<10).Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("over the bound: %v", err)
	}
	if ev, err := NewEventReader(strings.NewReader(big), 0).Next(); err != nil || len(ev.Data) != 100<<10 {
		t.Errorf("a long line under the bound: %d bytes, %v", len(ev.Data), err)
	}
}
