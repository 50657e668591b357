package kindenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
)

// saveStream is the stdout of a running `docker save`; Close waits for it
// and reports its failure.
type saveStream struct {
	io.ReadCloser
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func dockerSave(ctx context.Context, images ...string) *saveStream {
	c := exec.CommandContext(ctx, "docker", append([]string{"save"}, images...)...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.StdoutPipe()
	s := &saveStream{cmd: c, stderr: &stderr}
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		s.ReadCloser = io.NopCloser(&errReader{err})
		s.cmd = nil
		return s
	}
	s.ReadCloser = out
	return s
}

func (s *saveStream) Close() error {
	if s.cmd == nil {
		return nil
	}
	// Drain what the reader left so that docker save can finish.
	_, _ = io.Copy(io.Discard, s.ReadCloser)
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, s.stderr.String())
	}
	return nil
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
