package exec

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBoundedBufferKeepsHeadAndTail checks the buffer against the obvious
// answer over many random write patterns.
func TestBoundedBufferKeepsHeadAndTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		max := 1 + rng.IntN(40)
		var all []byte
		b := newBoundedBuffer(max)
		for range rng.IntN(12) {
			p := make([]byte, rng.IntN(3*max))
			for j := range p {
				p[j] = byte('a' + rng.IntN(26))
			}
			all = append(all, p...)
			b.Write(p)
		}
		h := max / 2
		var want string
		if len(all) <= max {
			want = string(all)
		} else {
			tail := all[len(all)-(max-h):]
			want = string(all[:h])
			if h > 0 {
				want += "\n"
			}
			want += "[sandbox: " + strconv.Itoa(len(all)-max) + " bytes of stdout dropped here; the first and last bytes are kept]\n" + string(tail)
		}
		if got := b.String("stdout"); got != want || b.truncated() != (len(all) > max) {
			t.Fatalf("case %d (max %d, %d bytes): got %q, want %q", i, max, len(all), got, want)
		}
	}
}

func TestBoundedBufferCutsWholeRunes(t *testing.T) {
	b := newBoundedBuffer(8)
	b.Write([]byte(strings.Repeat("é", 20))) // 2 bytes each: cuts fall mid-rune
	s := b.String("stdout")
	if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
		t.Errorf("got %q, want whole runes only", s)
	}
}

// TestFloodMemory floods stdout with 200 MB and checks that the runner
// allocated little more than its cap: the buffer is fixed, and the pipe is
// drained through one reused read buffer.
func TestFloodMemory(t *testing.T) {
	const flood = 200 << 20
	code := "import sys\nb = b'x' * 65536\nw = sys.stdout.buffer.write\nfor _ in range(" +
		strconv.Itoa(flood/65536) + "):\n    w(b)\nsys.stderr.write('done')\n"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := run(t, Job{Code: code}, Options{})
	runtime.ReadMemStats(&after)
	if !res.StdoutTruncated || res.StderrTruncated || res.Stderr != "done" {
		t.Errorf("stdout_truncated %v, stderr_truncated %v, stderr %q", res.StdoutTruncated, res.StderrTruncated, res.Stderr)
	}
	if !strings.Contains(res.Stdout, "[sandbox: "+strconv.Itoa(flood-DefaultMaxOutput)+" bytes of stdout dropped here") {
		t.Errorf("no marker counting the dropped bytes in stdout (%d bytes)", len(res.Stdout))
	}
	if n := len(res.Stdout); n > DefaultMaxOutput+200 {
		t.Errorf("kept %d bytes of stdout, cap %d", n, DefaultMaxOutput)
	}
	// Fixed buffers (2 x 1 MiB), the result strings (about 2 MiB more) and
	// small change; an unbounded buffer would allocate over 200 MB.
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d KiB while draining %d MiB", allocated>>10, flood>>20)
	if allocated > 16<<20 {
		t.Errorf("the runner allocated %d MiB for a %d MiB flood with a 1 MiB cap", allocated>>20, flood>>20)
	}
	if !bytes.HasPrefix([]byte(res.Stdout), bytes.Repeat([]byte("x"), 1000)) {
		t.Errorf("the head of stdout is lost")
	}
}

// FuzzBoundedBuffer checks, for any output and any way of splitting it into
// writes, that the buffer keeps exactly the head and the tail, counts the
// rest, and yields valid UTF-8.
func FuzzBoundedBuffer(f *testing.F) {
	f.Add([]byte("hello, world"), uint8(5), uint8(3))
	f.Add([]byte("caf\xc3\xa9 \xff\xfe \xe2\x82\xac"), uint8(6), uint8(1))
	f.Add(bytes.Repeat([]byte("é"), 50), uint8(9), uint8(7))
	f.Add(bytes.Repeat([]byte("\x01\xff<"), 40), uint8(20), uint8(4))
	f.Add([]byte("a\xff\xfeb"), uint8(40), uint8(1)) // a run of invalid bytes split between writes
	f.Fuzz(func(t *testing.T, data []byte, max, chunk uint8) {
		if max == 0 {
			max = 1
		}
		b := newBoundedBuffer(int(max))
		var streamed strings.Builder
		sink := func(text string) {
			if !utf8.ValidString(text) || text == "" {
				t.Fatalf("streamed %q: want valid UTF-8, not empty", text)
			}
			streamed.WriteString(text)
		}
		for i, p := 0, data; len(p) > 0; i++ {
			if i == 1 {
				b.attach(sink) // with the first write's bytes already there
			}
			k := min(len(p), int(chunk)+1)
			b.Write(p[:k])
			p = p[k:]
		}
		s := b.String("stdout")
		if !utf8.ValidString(s) {
			t.Fatalf("invalid UTF-8: %q", s)
		}
		if !strings.HasPrefix(s, streamed.String()) {
			t.Fatalf("streamed %q, not the start of the result's %q", streamed.String(), s)
		}
		if b.streamCost > int(max)/2 {
			t.Fatalf("streamed %d bytes of cost, over the head's %d", b.streamCost, int(max)/2)
		}
		// On the wire each side costs at most its share; the marker line
		// and the quotes come on top.
		marker, _ := json.Marshal("\n[sandbox: 99999 bytes of stdout dropped here; the first and last bytes are kept]\n")
		if enc, _ := json.Marshal(s); len(enc) > int(max)+len(marker) {
			t.Fatalf("%d bytes of JSON for a cap of %d: %s", len(enc), max, enc)
		}
		if jsonCost(data) != len(data) {
			// Escapes cost more than the bytes: the exact counts below
			// hold only for plain text.
			return
		}
		if over := len(data) - int(max); over > 0 {
			if b.dropped != int64(over) || !b.truncated() {
				t.Fatalf("dropped %d, want %d", b.dropped, over)
			}
			h := int(max) / 2
			// A rune cut in two at the gap goes; the rest of the head stays.
			if !bytes.HasPrefix(data[:h], b.head) || len(b.head) < h-utf8.UTFMax+1 {
				t.Fatalf("head %q, want %q", b.head, data[:h])
			}
		} else if b.truncated() || s != validUTF8(string(data)) {
			t.Fatalf("got %q from %q under the cap", s, data)
		}
	})
}

// TestOutputCapOnTheWire: a flood of control bytes and invalid UTF-8, which
// encoding/json writes as six and three bytes each, still gives an answer
// within the cap (plus the marker). Counting raw bytes, as the buffer once
// did, lets it grow to several times the cap: the control.
func TestOutputCapOnTheWire(t *testing.T) {
	const max = 64 << 10
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"control bytes", bytes.Repeat([]byte{1}, 4*max)},
		{"invalid UTF-8", bytes.Repeat([]byte{0xff, 'a'}, 2*max)},
		{"HTML", bytes.Repeat([]byte("<&>"), max)},
		{"under the cap in bytes, not on the wire", bytes.Repeat([]byte{2}, max)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBoundedBuffer(max)
			b.Write(tc.data)
			enc, _ := json.Marshal(b.String("stdout"))
			if len(enc) > max+200 {
				t.Errorf("%d bytes on the wire for a cap of %d", len(enc), max)
			}
			if !b.truncated() {
				t.Error("not marked truncated")
			}
			// The control: the same bytes kept by raw count.
			raw, _ := json.Marshal(validUTF8(string(tc.data[:min(len(tc.data), max)])))
			if len(raw) < 2*max {
				t.Errorf("control: raw counting gives only %d bytes on the wire", len(raw))
			}
		})
	}
}
