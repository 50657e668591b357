package exec

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// boundedBuffer keeps the first and the last bytes written to it and counts
// what falls in between, in the manner of os/exec's prefixSuffixSaver: memory
// never exceeds the cap whatever the child writes, and a run that prints
// little allocates little.
type boundedBuffer struct {
	// mu guards the buffer while its pipe is read: the drain goroutine
	// writes, and attach may come from another. Once the readers are done,
	// finish and String need it no more.
	mu       sync.Mutex
	headMax  int
	head     []byte // the first headMax bytes, grown as they come
	tailSize int
	tail     []byte // ring buffer of the latest bytes, made when head is full
	tailPos  int    // next write position in tail
	tailLen  int
	dropped  int64
	// Set by finish: the kept head and tail, fitted to the cap.
	done  bool
	final []byte
	// sink, when attached, gets the head's new text as it comes (see
	// stream); streamed and streamCost are the bytes of head it has had
	// and what they cost on the wire.
	sink                 func(text string)
	streamed, streamCost int
}

func newBoundedBuffer(max int) *boundedBuffer {
	h := max / 2
	return &boundedBuffer{headMax: h, tailSize: max - h}
}

// Write never fails, so that the reader keeps draining the pipe.
func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.stream()
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

// attach makes sink get the head's text from now on, starting with what
// the head holds already.
func (b *boundedBuffer) attach(sink func(text string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sink = sink
	b.stream()
}

// stream hands the sink the text of the head's bytes it has not had, as
// far as they are sure to be the start of what String returns: whole runes
// (one cut by the end of what was read waits for its rest, and a run of
// invalid bytes for the byte that ends it, since String makes the run one
// U+FFFD), costing no more on the wire than the head may (finish fits the
// head to that). So, concatenated, the texts a sink gets are a prefix of
// String's; past the head they stop, and what String adds (the rest of the
// head, the marker, the tail) is the caller's to send after the run.
func (b *boundedBuffer) stream() {
	if b.sink == nil {
		return
	}
	p := b.head[b.streamed:]
	n, cost := streamable(p, b.headMax-b.streamCost)
	if n == 0 {
		return
	}
	b.streamed += n
	b.streamCost += cost
	b.sink(validUTF8(string(p[:n])))
}

// streamable is how many bytes of p stream may hand out, and what they
// cost: the longest prefix of whole runes costing at most budget that ends
// with a valid rune.
func streamable(p []byte, budget int) (n, cost int) {
	i, c := 0, 0
	for i < len(p) && utf8.FullRune(p[i:]) {
		r, size := utf8.DecodeRune(p[i:])
		rc := costOf(r, size)
		if c+rc > budget {
			break
		}
		i, c = i+size, c+rc
		if r != utf8.RuneError || size > 1 {
			n, cost = i, c
		}
	}
	return n, cost
}

// truncated reports whether bytes were dropped.
func (b *boundedBuffer) truncated() bool {
	b.finish()
	return b.dropped > 0
}

// finish fits what was kept to the cap as encoding/json will write it: a
// control byte becomes six bytes on the wire, an invalid one three (U+FFFD),
// so a run printing them could otherwise make an answer several times the
// cap. The head and the tail give up whole runes at the gap until each
// costs no more than its share. It is idempotent.
func (b *boundedBuffer) finish() {
	if b.done {
		return
	}
	b.done = true
	var tail []byte
	if b.tailLen == len(b.tail) {
		tail = append(append(tail, b.tail[b.tailPos:]...), b.tail[:b.tailPos]...)
	} else {
		tail = b.tail[b.tailPos-b.tailLen : b.tailPos]
	}
	head := b.head
	if b.dropped == 0 {
		all := append(append([]byte(nil), head...), tail...)
		if jsonCost(all) <= b.headMax+b.tailSize {
			b.head, b.final = all, nil
			return
		}
		head, tail = all[:min(len(all), b.headMax)], all[min(len(all), b.headMax):]
	}
	// Runes cut in two by the gap go first, uncounted as before; then
	// whole runes until each side fits.
	head, tail = trimRunes(head, tail)
	fh := fitHead(head, b.headMax)
	ft := fitTail(tail, b.tailSize)
	b.dropped += int64(len(head) - len(fh) + len(tail) - len(ft))
	b.head, b.final = fh, ft
}

// String returns what was kept as valid UTF-8. Where bytes were dropped it
// puts a marker line naming how many; runes cut in two at either edge of the
// gap are trimmed rather than shown as garbage.
func (b *boundedBuffer) String(stream string) string {
	b.finish()
	if b.dropped == 0 {
		return validUTF8(string(b.head))
	}
	head, tail := b.head, b.final
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

// runeCost is what the rune at the start of p costs inside a JSON string
// as encoding/json writes it (escaping HTML too), and its size in p. An
// invalid byte counts as the U+FFFD it becomes.
func runeCost(p []byte) (cost, size int) {
	r, size := utf8.DecodeRune(p)
	return costOf(r, size), size
}

func costOf(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size <= 1:
		return 3
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// jsonCost is the cost of all of p.
func jsonCost(p []byte) int {
	n := 0
	for len(p) > 0 {
		c, size := runeCost(p)
		n += c
		p = p[size:]
	}
	return n
}

// fitHead is the longest prefix of p that costs at most max.
func fitHead(p []byte, max int) []byte {
	n, i := 0, 0
	for i < len(p) {
		c, size := runeCost(p[i:])
		if n+c > max {
			break
		}
		n += c
		i += size
	}
	return p[:i]
}

// fitTail is the longest suffix of p that costs at most max.
func fitTail(p []byte, max int) []byte {
	n, i := 0, len(p)
	for i > 0 {
		r, size := utf8.DecodeLastRune(p[:i])
		if c := costOf(r, size); n+c <= max {
			n += c
			i -= size
			continue
		}
		break
	}
	return p[i:]
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
