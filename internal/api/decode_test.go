package api

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want exec.Job
	}{
		{"code only gets the default timeout", `{"code":"print(1)"}`,
			exec.Job{Code: "print(1)", Timeout: 20 * time.Second}},
		{"a surrogate pair, an escaped backslash before u, U+FFFD itself", `{"code":"\ud83d\ude00 \\ud800 \ufffd �"}`,
			exec.Job{Code: "😀 \\ud800 \ufffd \ufffd", Timeout: 20 * time.Second}},
		{"explicit timeout", `{"code":"x","timeout_s":60}`,
			exec.Job{Code: "x", Timeout: 60 * time.Second}},
		{"minimum timeout", `{"code":"x","timeout_s":1}`,
			exec.Job{Code: "x", Timeout: time.Second}},
		{"a whole timeout written as a float, as SDKs send numbers", `{"code":"x","timeout_s":10.0}`,
			exec.Job{Code: "x", Timeout: 10 * time.Second}},
		{"a whole timeout with an exponent", `{"code":"x","timeout_s":1.5e1}`,
			exec.Job{Code: "x", Timeout: 15 * time.Second}},
		{"surrounding whitespace", " \n{\"code\":\"x\"}\n\t ",
			exec.Job{Code: "x", Timeout: 20 * time.Second}},
		{"text and base64 files", `{"code":"x","files":[
			{"path":"a.txt","content":"héllo"},
			{"path":"d/b.txt","content":"hi","encoding":"utf-8"},
			{"path":"bin","content":"AP8=","encoding":"base64"}]}`,
			exec.Job{Code: "x", Timeout: 20 * time.Second, Files: []exec.File{
				{Path: "a.txt", Content: []byte("héllo")},
				{Path: "d/b.txt", Content: []byte("hi")},
				{Path: "bin", Content: []byte{0, 0xff}},
			}}},
		{"empty file", `{"code":"x","files":[{"path":"empty","content":""}]}`,
			exec.Job{Code: "x", Timeout: 20 * time.Second, Files: []exec.File{{Path: "empty", Content: []byte{}}}}},
		{"empty files list", `{"code":"x","files":[]}`,
			exec.Job{Code: "x", Timeout: 20 * time.Second}},
		{"null files and timeout", `{"code":"x","files":null,"timeout_s":null}`,
			exec.Job{Code: "x", Timeout: 20 * time.Second}},
		{"output patterns", `{"code":"x","outputs":["*.png","out/**"]}`,
			exec.Job{Code: "x", Timeout: 20 * time.Second, Outputs: []string{"*.png", "out/**"}}},
		{"nested values are skipped whole", `{"files":[{"content":"{\"path\":1}","path":"a"}],"code":"{}"}`,
			exec.Job{Code: "{}", Timeout: 20 * time.Second, Files: []exec.File{{Path: "a", Content: []byte(`{"path":1}`)}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(strings.NewReader(tt.body))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !jobsEqual(got, tt.want) {
				t.Errorf("Decode = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	many := make([]string, MaxFiles+1)
	for i := range many {
		many[i] = fmt.Sprintf(`{"path":"f%d","content":""}`, i)
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, MaxFilesBytes/2+1))
	tests := []struct {
		name string
		body string
		want string // a substring the message must contain
	}{
		{"empty body", ``, "empty body"},
		{"not JSON", `code=print(1)`, "malformed JSON at byte offset 1"},
		{"truncated", `{"code":"x"`, "ends in the middle"},
		{"syntax error position", `{"code": "x",}`, "malformed JSON at byte offset 14"},
		{"trailing object", `{"code":"x"}{"code":"y"}`, "unexpected data after the request object"},
		{"trailing garbage", `{"code":"x"} x`, "unexpected data after the request object"},
		{"trailing brace", `{"code":"x"}}`, "unexpected data after the request object"},
		{"array body", `[1]`, "must be a JSON object, not array"},
		{"string body", `"print(1)"`, "must be a JSON object, not string"},
		{"unknown field", `{"code":"x","timeout":5}`, `unknown field "timeout"`},
		{"a float timeout out of range", `{"code":"x","timeout_s":1e300}`, `not a whole number of seconds`},
		{"a whole float timeout over the limit", `{"code":"x","timeout_s":61.0}`, "timeout_s 61 out of range"},
		{"unknown file field", `{"code":"x","files":[{"path":"a","content":"","mode":"0755"}]}`, `unknown field "mode"`},
		{"field in another case", `{"Code":"x"}`, `unknown field "Code": field names are lower case: code, files, outputs, timeout_s`},
		{"output pattern leaving the directory", `{"code":"x","outputs":["*.png","../*"]}`, `outputs[1]: pattern "../*" has a ".." component`},
		{"absolute output pattern", `{"code":"x","outputs":["/etc/*"]}`, `outputs[0]: pattern "/etc/*" is absolute`},
		{"malformed output pattern", `{"code":"x","outputs":["[a"]}`, `outputs[0]: pattern "[a": bad component`},
		{"outputs not a list", `{"code":"x","outputs":"*.png"}`, `field "outputs": expected an array`},
		{"too many outputs", `{"code":"x","outputs":[` + strings.Repeat(`"a",`, exec.MaxOutputPatterns) + `"a"]}`, "too many outputs"},
		{"file field in another case", `{"code":"x","files":[{"path":"a","content":""},{"PATH":"b","content":""}]}`, `unknown field "files[1].PATH"`},
		{"duplicate field", `{"code":"x","timeout_s":5,"code":"y"}`, `field "code" given twice`},
		{"duplicate file field", `{"code":"x","files":[{"path":"a","path":"b","content":""}]}`, `field "files[0].path" given twice`},
		{"bytes that are not UTF-8", "{\"code\":\"x\",\"files\":[{\"path\":\"a\",\"content\":\"\xff\xfe\"}]}", "the body is not UTF-8 (byte offset 44)"},
		{"a lone high surrogate", `{"code":"x","files":[{"path":"a","content":"\ud800x"}]}`, `a lone surrogate \ud800 at byte offset 44`},
		{"a lone low surrogate", `{"code":"print('\udcff')"}`, `a lone surrogate \udcff`},
		{"a high surrogate before an escape", `{"code":"\ud83d\n"}`, `a lone surrogate \ud83d`},
		{"a list item of the wrong type", `{"code":"x","files":[{"path":"a","content":""},{"path":"b","content":5}]}`, `field "files.content": expected a string, got number (the value ending at byte offset 70)`},
		{"missing code", `{"timeout_s":5}`, "missing code"},
		{"empty code", `{"code":""}`, "missing code"},
		{"null body", `null`, "missing code"},
		{"code not a string", `{"code":42}`, `field "code": expected a string, got number`},
		{"NUL in code", `{"code":"print(1)\u0000"}`, "NUL byte"},
		{"timeout zero", `{"code":"x","timeout_s":0}`, "timeout_s 0 out of range"},
		{"timeout negative", `{"code":"x","timeout_s":-3}`, "timeout_s -3 out of range"},
		{"timeout too long", `{"code":"x","timeout_s":61}`, "timeout_s 61 out of range"},
		{"timeout fraction", `{"code":"x","timeout_s":1.5}`, `field "timeout_s": 1.5 is not a whole number of seconds`},
		{"timeout string", `{"code":"x","timeout_s":"5"}`, `field "timeout_s": expected a whole number of seconds, got "5"`},
		{"files not a list", `{"code":"x","files":{}}`, `field "files": expected an array`},
		{"too many files", `{"code":"x","files":[` + strings.Join(many, ",") + `]}`, "too many files"},
		{"files too large", `{"code":"x","files":[{"path":"a","content":"` + big + `","encoding":"base64"},{"path":"b","content":"` + big + `","encoding":"base64"}]}`, "files too large"},
		{"bad base64", `{"code":"x","files":[{"path":"a","content":"!!","encoding":"base64"}]}`, `files[0] ("a"): content is not valid base64`},
		{"unknown encoding", `{"code":"x","files":[{"path":"a","content":"","encoding":"hex"}]}`, `unknown encoding "hex"`},
		{"dot-dot path", `{"code":"x","files":[{"path":"../etc/passwd","content":""}]}`, `files[0]: file path "../etc/passwd"`},
		{"inner dot-dot path", `{"code":"x","files":[{"path":"a/../../b","content":""}]}`, `files[0]: file path "a/../../b"`},
		{"absolute path", `{"code":"x","files":[{"path":"/etc/passwd","content":""}]}`, `files[0]: file path "/etc/passwd" is absolute`},
		{"NUL in path", `{"code":"x","files":[{"path":"a\u0000b","content":""}]}`, `NUL byte`},
		{"empty path", `{"code":"x","files":[{"path":"","content":""}]}`, `files[0]: file path is empty`},
		{"over-long path", `{"code":"x","files":[{"path":"` + strings.Repeat("a/", 4000) + `b","content":""}]}`, `over the limit of 1024`},
		{"dot component", `{"code":"x","files":[{"path":"./a","content":""}]}`, `"." component`},
		{"duplicate path", `{"code":"x","files":[{"path":"a","content":""},{"path":"a","content":""}]}`, `already given by files[0]`},
		{"file under a file", `{"code":"x","files":[{"path":"a","content":""},{"path":"a/b","content":""}]}`, `inside files[0] ("a"), which is a file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(tt.body))
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("Decode error = %v (%T), want *api.Error", err, err)
			}
			if ae.Status != http.StatusBadRequest {
				t.Errorf("status = %d, want 400", ae.Status)
			}
			if !strings.Contains(ae.Msg, tt.want) {
				t.Errorf("message %q does not contain %q", ae.Msg, tt.want)
			}
		})
	}
}

func TestDecodeBodyTooLarge(t *testing.T) {
	body := `{"code":"` + strings.Repeat("x", 200) + `"}`
	for _, tail := range []string{"", "   "} { // over the limit inside the object, and after it
		limit := int64(len(body)) - 10
		if tail != "" {
			limit = int64(len(body)) + 1
		}
		r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body+tail)), limit)
		_, err := Decode(r)
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("limit %d: Decode error = %v, want 413", limit, err)
		}
		if !strings.Contains(ae.Msg, fmt.Sprint(limit)) {
			t.Errorf("message %q does not name the limit %d", ae.Msg, limit)
		}
	}
}

func TestDecodeReadError(t *testing.T) {
	_, err := Decode(io.MultiReader(strings.NewReader(`{"code":`), errReader{}))
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Msg, "connection reset") {
		t.Fatalf("Decode error = %#v, want 400 naming the read error", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestFromJobRoundTrip(t *testing.T) {
	job := exec.Job{Code: "print('é')\n", Timeout: 7 * time.Second, Files: []exec.File{
		{Path: "text.csv", Content: []byte("a,b\n1,2\n")},
		{Path: "raw/blob", Content: []byte{0xff, 0xfe, 0, 1}},
		{Path: "html", Content: []byte("<a href='x'>&</a>")},
	}, Outputs: []string{"out/*.csv"}}
	req := FromJob(job)
	if req.Files[0].Encoding != "" || req.Files[1].Encoding != wire.EncodingBase64 {
		t.Errorf("encodings = %q, %q; want text as is and bytes as base64", req.Files[0].Encoding, req.Files[1].Encoding)
	}
	body, err := wire.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Decode(%s): %v", body, err)
	}
	if !jobsEqual(got, job) {
		t.Errorf("round trip = %+v, want %+v", got, job)
	}
}

func TestFromJobRoundsTimeoutUp(t *testing.T) {
	req := FromJob(exec.Job{Code: "x", Timeout: 1500 * time.Millisecond})
	if req.TimeoutS == nil || *req.TimeoutS != 2 {
		t.Errorf("timeout_s = %v, want 2", req.TimeoutS)
	}
}

// FuzzDecode checks that Decode never panics, that every error is an
// *Error with a 4xx status, and that every job it accepts survives
// FromJob, Encode and Decode unchanged.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"code":"print(1)"}`,
		`{"code":"x","timeout_s":60,"files":[{"path":"a/b","content":"AP8=","encoding":"base64"}]}`,
		`{"code":"x","files":[{"path":"a","content":"é\u0000","encoding":"utf-8"}]}`,
		`{"code":"x","files":[{"path":"../a","content":""}]}`,
		`{"code":"x","files":[{"path":"a","content":""},{"path":"a/b","content":""}]}`,
		`{"code":"x"} {}`,
		`{"Code":"x","TIMEOUT_S":3}`,
		`{"code":"\ud800"}`,
		"{\"code\":\"\xff\"}",
		`[]`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		job, err := Decode(bytes.NewReader(body))
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status < 400 || ae.Status > 499 || ae.Msg == "" {
				t.Fatalf("Decode(%q) error = %#v, want a 4xx *api.Error", body, err)
			}
			return
		}
		again, err := wire.Marshal(FromJob(job))
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		job2, err := Decode(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("Decode(%q) rejects what Decode(%q) accepted: %v", again, body, err)
		}
		if !jobsEqual(job, job2) {
			t.Fatalf("round trip changed the job:\n%+v\n%+v", job, job2)
		}
	})
}

// jobsEqual compares jobs treating nil and empty contents alike.
func jobsEqual(a, b exec.Job) bool {
	if a.Code != b.Code || a.Timeout != b.Timeout || len(a.Files) != len(b.Files) || !slices.Equal(a.Outputs, b.Outputs) {
		return false
	}
	for i := range a.Files {
		if a.Files[i].Path != b.Files[i].Path || !bytes.Equal(a.Files[i].Content, b.Files[i].Content) {
			return false
		}
	}
	return reflect.DeepEqual(a.Files == nil, b.Files == nil) || len(a.Files) == 0
}
