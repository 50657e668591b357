package mcpserver

import (
	"bytes"
	"fmt"
	"mime"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandbox/internal/exec"
	"github.com/sandboxd/sandbox/wire"
)

// Bounds of what a result shows the model. The first four are the Python
// package's (sandbox_client's snippets.py and images.py), so that a model
// reads a run the same way through either.
const (
	// MaxStreamChars is how much of each stream the text keeps, its head
	// and tail: the sandbox keeps up to 1 MiB of each, far more than a
	// model should read in one turn.
	MaxStreamChars = 20_000
	// ShownFileChars is the largest text output file whose content the
	// text shows.
	ShownFileChars = 2_000
	// MaxImages images of at most MaxImageBytes each come back as image
	// content: a chart is tens of kilobytes, every image costs the model's
	// context, and the model APIs refuse images over about 5 MB.
	MaxImages     = 4
	MaxImageBytes = 1 << 20
	// MaxResources other files, MaxResourceBytes of them in all, come back
	// as embedded resources: enough for the tables and reports a snippet
	// writes, and a result an assistant's host holds in memory at once.
	MaxResources     = 16
	MaxResourceBytes = 1 << 20
)

// imageSignatures are the image formats the model APIs take, by their first
// bytes; WebP is RIFF....WEBP, checked apart.
var imageSignatures = []struct {
	prefix string
	mime   string
}{
	{"\x89PNG\r\n\x1a\n", "image/png"},
	{"\xff\xd8\xff", "image/jpeg"},
	{"GIF87a", "image/gif"},
	{"GIF89a", "image/gif"},
}

// imageType is the media type of data when it is an image the model can be
// shown, else "".
func imageType(data []byte) string {
	for _, s := range imageSignatures {
		if bytes.HasPrefix(data, []byte(s.prefix)) {
			return s.mime
		}
	}
	if len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP" {
		return "image/webp"
	}
	return ""
}

// attachment is how one output file comes back.
type attachment int

const (
	notReturned   attachment = iota // skipped or omitted by the sandbox, or unreadable
	imageShown                      // image content
	imageLeft                       // an image over MaxImages or MaxImageBytes
	resourceAdded                   // an embedded resource
	resourceLeft                    // over MaxResources or MaxResourceBytes
)

// toolResult is the run as the model reads it: the text (what went wrong
// said plainly first, then the exit code, run time, stdout and stderr,
// then the output files), then the images among the files, then the other
// files as embedded resources, each within its bounds.
func toolResult(res wire.Result) *mcp.CallToolResult {
	var images, resources []mcp.Content
	how := make([]attachment, len(res.Files))
	resourceBytes := 0
	for i, f := range res.Files {
		if f.Omitted || f.Skipped != "" {
			continue
		}
		data, err := f.Bytes()
		if err != nil {
			continue // an encoding the client cannot read: listed as not returned
		}
		if mt := imageType(data); mt != "" && f.Encoding == wire.EncodingBase64 {
			if len(images) < MaxImages && len(data) <= MaxImageBytes {
				images = append(images, &mcp.ImageContent{Data: data, MIMEType: mt})
				how[i] = imageShown
			} else {
				how[i] = imageLeft
			}
			continue
		}
		if len(resources) >= MaxResources || resourceBytes+len(data) > MaxResourceBytes {
			how[i] = resourceLeft
			continue
		}
		resourceBytes += len(data)
		resources = append(resources, &mcp.EmbeddedResource{Resource: resourceOf(res.SandboxID, f, data)})
		how[i] = resourceAdded
	}
	content := append([]mcp.Content{&mcp.TextContent{Text: resultText(res, how)}}, images...)
	content = append(content, resources...)
	meta := mcp.Meta{"sandbox_id": res.SandboxID}
	if res.RequestID != "" {
		meta["request_id"] = res.RequestID
	}
	return &mcp.CallToolResult{Content: content, Meta: meta}
}

// resourceOf is an output file as an embedded resource, named
// sandbox://SANDBOX_ID/PATH: the run it came from and its path there.
func resourceOf(sandboxID string, f wire.OutputFile, data []byte) *mcp.ResourceContents {
	u := url.URL{Scheme: "sandbox", Host: sandboxID, Path: "/" + f.Path}
	rc := &mcp.ResourceContents{URI: u.String(), MIMEType: mime.TypeByExtension(path.Ext(f.Path))}
	if f.Encoding == wire.EncodingUTF8 {
		rc.Text = f.Content
		if rc.MIMEType == "" {
			rc.MIMEType = "text/plain; charset=utf-8"
		}
		return rc
	}
	rc.Blob = data
	if rc.MIMEType == "" {
		rc.MIMEType = "application/octet-stream"
	}
	return rc
}

// resultText is the text of the run, in the words of the Python package's
// result_text.
func resultText(res wire.Result, how []attachment) string {
	var lines []string
	if res.TimedOut {
		lines = append(lines, "The code timed out: it was still running at its time limit, so it and every process it "+
			"started were killed. Output below is what it printed before that.")
	}
	if res.OOMKilled {
		lines = append(lines, "The code ran out of memory and was killed.")
	}
	for _, s := range []struct {
		name string
		cut  bool
	}{{"stdout", res.StdoutTruncated}, {"stderr", res.StderrTruncated}} {
		if s.cut {
			lines = append(lines, fmt.Sprintf("The %s was longer than the sandbox keeps: its middle was dropped where marked, "+
				"only the beginning and end are shown.", s.name))
		}
	}
	lines = append(lines, fmt.Sprintf("exit code: %d", res.ExitCode), fmt.Sprintf("run time: %d ms", res.DurationMS))
	for _, s := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
		if s.text == "" {
			lines = append(lines, s.name+": (empty)")
			continue
		}
		lines = append(lines, s.name+":\n"+strings.TrimRight(shorten(s.text, MaxStreamChars), "\n"))
	}
	lines = append(lines, filesText(res, how)...)
	return strings.Join(lines, "\n")
}

// shorten keeps the head and tail of text, max characters in all, with a
// marker saying how many were cut.
func shorten(text string, max int) string {
	n := utf8.RuneCountInString(text)
	if n <= max {
		return text
	}
	r := []rune(text)
	head := max / 2
	return fmt.Sprintf("%s\n[... %d characters cut here to keep this short ...]\n%s",
		string(r[:head]), n-max, string(r[n-(max-head):]))
}

// filesText lists the output files and how each came back.
func filesText(res wire.Result, how []attachment) []string {
	if len(res.Files) == 0 {
		return nil
	}
	lines := []string{"files:"}
	for i, f := range res.Files {
		var line string
		switch {
		case f.Skipped != "":
			line = fmt.Sprintf("- %s: not returned (%s)", f.Path, f.Skipped)
		case f.Omitted:
			line = fmt.Sprintf("- %s: %d bytes, not returned: over the limit of %d files and %d MiB in all",
				f.Path, f.Size, exec.MaxOutputFiles, exec.MaxOutputBytes>>20)
		case how[i] == imageShown:
			line = fmt.Sprintf("- %s: %d bytes, returned; an image, shown to you after this text", f.Path, f.Size)
		case how[i] == imageLeft:
			line = fmt.Sprintf("- %s: %d bytes, returned; an image, not shown to you: over %d images or %d bytes",
				f.Path, f.Size, MaxImages, MaxImageBytes)
		case how[i] == resourceLeft:
			line = fmt.Sprintf("- %s: %d bytes, not attached: over %d files or %d bytes of attachments",
				f.Path, f.Size, MaxResources, MaxResourceBytes)
		case how[i] == notReturned:
			line = fmt.Sprintf("- %s: %d bytes, not returned: its encoding %q is unknown", f.Path, f.Size, f.Encoding)
		case f.Encoding == wire.EncodingUTF8 && utf8.RuneCountInString(f.Content) <= ShownFileChars:
			line = fmt.Sprintf("- %s: %d bytes, returned as a resource; its text:\n%s", f.Path, f.Size, strings.TrimRight(f.Content, "\n"))
		default:
			line = fmt.Sprintf("- %s: %d bytes, returned as a resource", f.Path, f.Size)
		}
		lines = append(lines, line)
	}
	if res.FilesIncomplete {
		lines = append(lines, "Some matching files were not returned: over the limits.")
	}
	return lines
}
