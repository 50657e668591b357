package kindenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// Scripts runs the shell scripts in e2e/hack that prepare the host and build
// the images. Each is cached, so running them again is cheap.
type Scripts struct {
	Root     string    // repository root
	Progress io.Writer // the scripts' step log goes here
}

func (s Scripts) run(ctx context.Context, timeout time.Duration, script string, args ...string) (string, error) {
	out, err := cmd{
		name:    filepath.Join(s.Root, "e2e", "hack", script),
		args:    args,
		stderr:  s.Progress,
		timeout: timeout,
	}.output(ctx)
	return strings.TrimSpace(out), err
}

// HostSetup installs what the host lacks, starts dockerd and, where the
// capability bounding set needs it, the runc wrapper.
func (s Scripts) HostSetup(ctx context.Context) error {
	_, err := s.run(ctx, 15*time.Minute, "host-setup.sh")
	return err
}

// Binaries builds (or finds cached) the Kubernetes and runtime binaries and
// returns the directory of each set by name ("kubernetes", "containerd", ...).
func (s Scripts) Binaries(ctx context.Context) (map[string]string, error) {
	// A cold build of everything takes about 20-30 minutes on 2 cores.
	if _, err := s.run(ctx, 75*time.Minute, "build-bins.sh"); err != nil {
		return nil, err
	}
	out, err := s.run(ctx, time.Minute, "build-bins.sh", "--print")
	if err != nil {
		return nil, err
	}
	sets := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			sets[k] = v
		}
	}
	if sets["kubernetes"] == "" {
		return nil, fmt.Errorf("build-bins.sh --print named no kubernetes set: %q", out)
	}
	return sets, nil
}

// RootFilesystems debootstraps (or finds cached) the Debian root filesystems.
func (s Scripts) RootFilesystems(ctx context.Context) error {
	_, err := s.run(ctx, 30*time.Minute, "rootfs.sh")
	return err
}

// NodeImage builds (or finds cached) the kind node image and returns its name.
func (s Scripts) NodeImage(ctx context.Context) (string, error) {
	out, err := s.run(ctx, 90*time.Minute, "node-image.sh")
	if err != nil {
		return "", err
	}
	lines := strings.Split(out, "\n")
	return lines[len(lines)-1], nil
}

// SandboxImage builds the sandbox image (sandbox:dev) around bin, or around
// bin/sandbox built from the current source when bin is empty.
func (s Scripts) SandboxImage(ctx context.Context, bin string) error {
	args := []string{}
	if bin != "" {
		args = append(args, bin)
	}
	_, err := s.run(ctx, 15*time.Minute, "sandbox-image.sh", args...)
	return err
}
