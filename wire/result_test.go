package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

func TestEncodeContent(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
	}{
		{"a,b\n1,2\n", EncodingUTF8},
		{"", EncodingUTF8},
		{`{"a": "b", "c": ["d"]}`, EncodingUTF8}, // quotes double, no more
		{"naïve ☃\n", EncodingUTF8},
		{"\x89PNG\r\n\x1a\n\x00\x00", EncodingBase64},
		{"\xff", EncodingBase64},
		{strings.Repeat("\x01", 100), EncodingBase64}, // six bytes each as JSON
	} {
		content, enc := EncodeContent([]byte(tt.in))
		if enc != tt.want {
			t.Errorf("EncodeContent(%q): %s, want %s", tt.in, enc, tt.want)
			continue
		}
		f := OutputFile{Path: "f", Content: content, Encoding: enc}
		back, err := f.Bytes()
		if err != nil || string(back) != tt.in {
			t.Errorf("EncodeContent(%q) does not round-trip: %q, %v", tt.in, back, err)
		}
		if enc == EncodingUTF8 {
			b, _ := json.Marshal(content)
			if len(b)-2 != jsonStringLen([]byte(tt.in)) && !strings.ContainsAny(tt.in, "<>&") {
				t.Errorf("jsonStringLen(%q) = %d, encoding/json writes %d", tt.in, jsonStringLen([]byte(tt.in)), len(b)-2)
			}
		}
	}
}

func TestOutputFileJSON(t *testing.T) {
	for _, tt := range []struct {
		f    OutputFile
		want string
	}{
		{OutputFile{Path: "a.html", Size: 3, Content: "<b>", Encoding: EncodingUTF8},
			`{"path":"a.html","size":3,"content":"<b>","encoding":"utf-8"}`},
		{OutputFile{Path: "e", Content: "", Encoding: EncodingUTF8}, `{"path":"e","size":0,"content":"","encoding":"utf-8"}`},
		{OutputFile{Path: "big", Size: 1 << 30, Omitted: true}, `{"path":"big","size":1073741824,"omitted":true}`},
		{OutputFile{Path: "leak", Skipped: "symlink"}, `{"path":"leak","skipped":"symlink"}`},
	} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf) // as the answer is written: no HTML escaping
		enc.SetEscapeHTML(false)
		err := enc.Encode(tt.f)
		b := bytes.TrimSpace(buf.Bytes())
		if err != nil || string(b) != tt.want {
			t.Errorf("%+v: %s, %v; want %s", tt.f, b, err, tt.want)
		}
		var back OutputFile
		if err := json.Unmarshal(b, &back); err != nil || back != tt.f {
			t.Errorf("%s decodes to %+v, %v", b, back, err)
		}
	}
	bin := OutputFile{Path: "b", Size: 2, Content: base64.StdEncoding.EncodeToString([]byte{0, 0xff}), Encoding: EncodingBase64}
	if b, err := bin.Bytes(); err != nil || string(b) != "\x00\xff" {
		t.Errorf("Bytes: %q, %v", b, err)
	}
	if _, err := (OutputFile{Path: "x", Omitted: true}).Bytes(); err == nil {
		t.Error("an omitted file has bytes")
	}
}
