package exec

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// boundedBuffer keeps the first and the last bytes written to it and counts
// what falls in between, in the manner of os/exec's prefixSuffixSaver: memory
// never exceeds the cap whatever the child writes, and a run that prints
// little allocates little.
type boundedBuffer struct {
	headMax  int
	head     []byte // the first headMax bytes, grown as they come
	tailSize int
	tail     []byte // ring buffer of the latest bytes, made when head is full
	tailPos  int    // next write position in tail
	tailLen  int
	dropped  int64
}

func newBoundedBuffer(max int) *boundedBuffer {
	h := max / 2
	return &boundedBuffer{headMax: h, tailSize: max - h}
}

// Write never fails, so that the reader keeps draining the pipe.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.headMax - len(b.head); room > 0 {
		k := min(room, len(p))
		if cap(b.head)-len(b.head) < k {
			// Grow by doubling, but never past headMax.
			grown := make([]byte, len(b.head), min(b.headMax, max(2*cap(b.head), len(b.head)+k, 4096)))
			copy(grown, b.head)
			b.head = grown
		}
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if b.tail == nil {
		b.tail = make([]byte, b.tailSize)
	}
	if len(b.tail) == 0 {
		b.dropped += int64(len(p))
		return n, nil
	}
	// Only the last len(tail) bytes of p can survive.
	if over := len(p) - len(b.tail); over > 0 {
		b.dropped += int64(over) + int64(b.tailLen)
		b.tailLen = 0
		p = p[over:]
	}
	for len(p) > 0 {
		k := copy(b.tail[b.tailPos:], p)
		p = p[k:]
		b.tailPos = (b.tailPos + k) % len(b.tail)
		if b.tailLen+k > len(b.tail) {
			b.dropped += int64(b.tailLen + k - len(b.tail))
			b.tailLen = len(b.tail)
		} else {
			b.tailLen += k
		}
	}
	return n, nil
}

// truncated reports whether bytes were dropped.
func (b *boundedBuffer) truncated() bool { return b.dropped > 0 }

// String returns what was kept as valid UTF-8. Where bytes were dropped it
// puts a marker line naming how many; runes cut in two at either edge of the
// gap are trimmed rather than shown as garbage.
func (b *boundedBuffer) String(stream string) string {
	var tail []byte
	if b.tailLen == len(b.tail) {
		tail = append(append(tail, b.tail[b.tailPos:]...), b.tail[:b.tailPos]...)
	} else {
		tail = b.tail[b.tailPos-b.tailLen : b.tailPos]
	}
	if b.dropped == 0 {
		return validUTF8(string(b.head) + string(tail))
	}
	head, tail := trimRunes(b.head, tail)
	var s strings.Builder
	s.Grow(len(head) + len(tail) + 80)
	s.WriteString(validUTF8(string(head)))
	if len(head) > 0 && head[len(head)-1] != '\n' {
		s.WriteByte('\n')
	}
	fmt.Fprintf(&s, "[sandbox: %d bytes of %s dropped here; the first and last bytes are kept]\n", b.dropped, stream)
	s.WriteString(validUTF8(string(tail)))
	return s.String()
}

// trimRunes drops an incomplete UTF-8 sequence at the end of head and stray
// continuation bytes at the start of tail, both caused by the cut.
func trimRunes(head, tail []byte) ([]byte, []byte) {
	for i := 1; i < utf8.UTFMax && i <= len(head); i++ {
		c := head[len(head)-i]
		if utf8.RuneStart(c) {
			if r, _ := utf8.DecodeRune(head[len(head)-i:]); r == utf8.RuneError && c >= utf8.RuneSelf {
				head = head[:len(head)-i]
			}
			break
		}
	}
	for i := 0; i < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	return head, tail
}

// validUTF8 makes s valid UTF-8 for JSON, replacing each run of invalid
// bytes with U+FFFD and keeping everything readable.
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// drain copies r into b until EOF or error; it is the body of a reader
// goroutine, so that the child never blocks on a full pipe.
func drain(r io.Reader, b *boundedBuffer) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
