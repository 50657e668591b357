package seal

import (
	"context"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestICMPPingGroupRange runs the probe against the kernel itself, in a
// network namespace of its own: with the pod's empty ping_group_range the
// echo socket is refused and loopback is cut; with the range the container
// runtime sets by default (every group), the same echo is answered and the
// probe calls the path open (the control).
func TestICMPPingGroupRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace of its own")
	}
	for _, tc := range []struct {
		rng    string
		sealed bool
		what   string
	}{
		{PingGroupNone, true, "no ICMP socket"},
		{"0 2147483647", false, "answered an echo"},
	} {
		listen := netnsListener(t, tc.rng)
		p := Prover{Targets: []Target{{Kind: ICMP, Addr: "127.0.0.1"}}, Bound: 2 * time.Second, ListenICMP: listen}
		c := p.Check(context.Background())
		if c.Sealed != tc.sealed || !strings.Contains(c.Evidence(), tc.what) {
			t.Errorf("ping_group_range %q: sealed %v, %s; want sealed %v, %q", tc.rng, c.Sealed, c.Evidence(), tc.sealed, tc.what)
		}
	}
}

// netnsListener opens echo sockets in a new network namespace whose
// loopback is up and whose ping_group_range is rng. A socket belongs to
// the namespace of the thread that made it, so one locked thread makes
// them all; it ends with the test, and the thread with it.
func netnsListener(t *testing.T, rng string) ListenICMP {
	type req struct {
		network string
		reply   chan any
	}
	reqs, ready := make(chan req), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ready <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return err
			}
			if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(rng), 0); err != nil {
				return err
			}
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			ifr, err := unix.NewIfreq("lo")
			if err != nil {
				return err
			}
			ifr.SetUint16(unix.IFF_UP)
			return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		}()
		for r := range reqs {
			c, err := listenICMP(r.network)
			if err != nil {
				r.reply <- err
			} else {
				r.reply <- c
			}
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("network namespace: %v", err)
	}
	t.Cleanup(func() { close(reqs) })
	return func(network string) (net.PacketConn, error) {
		r := req{network, make(chan any, 1)}
		reqs <- r
		switch v := (<-r.reply).(type) {
		case error:
			return nil, v
		default:
			return v.(net.PacketConn), nil
		}
	}
}
