package seal

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// NetworkPolicy says nothing of ICMP, and engines pass echo for every pod
// (kube-router does), so a pod that "reaches nothing" could still carry
// data out and back in echo payloads through an unprivileged ICMP socket.
// The pod closes that itself: its network namespace's ping_group_range is
// empty, so no process in it may open one (raw sockets need CAP_NET_RAW,
// which the pod drops). Pod Security "restricted" allows the sysctl.
const (
	PingGroupSysctl = "net.ipv4.ping_group_range"
	// PingGroupNone is the kernel's own empty range (no group may ping);
	// it covers ICMPv6 echo sockets too, which read the same setting.
	PingGroupNone = "1 0"
)

// NodeIPEnv carries a sandbox pod's node address (the downward API's
// status.hostIP) to its runner, which proves an echo to it unanswered: an
// address that answers echo wherever the path is open. A tool's
// environment leaves it out.
const NodeIPEnv = "SANDBOX_NODE_IP"

// ListenICMP opens an unprivileged ICMP echo socket for network ("udp4" or
// "udp6"), as icmp.ListenPacket does.
type ListenICMP func(network string) (net.PacketConn, error)

func listenICMP(network string) (net.PacketConn, error) {
	addr := "0.0.0.0"
	if network == "udp6" {
		addr = "::"
	}
	c, err := icmp.ListenPacket(network, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// probeICMP sends one echo request to t.Addr (an address, no port) with a
// random payload and waits for the reply carrying it. A socket the kernel
// refuses (the pod's empty ping_group_range) or an echo nobody answers is a
// cut path; an answer is an open one.
func (p Prover) probeICMP(ctx context.Context, t Target) Outcome {
	dst, err := netip.ParseAddr(t.Addr)
	if err != nil {
		return Outcome{What: fmt.Sprintf("not an address: %q", t.Addr)}
	}
	dst = dst.Unmap()
	network, proto := "udp4", 1
	var typ icmp.Type = ipv4.ICMPTypeEcho
	if dst.Is6() {
		network, proto, typ = "udp6", 58, ipv6.ICMPTypeEchoRequest
	}
	listen := p.ListenICMP
	if listen == nil {
		listen = listenICMP
	}
	c, err := listen(network)
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return Outcome{Cut: true, What: "no ICMP socket: " + err.Error()}
		}
		return Outcome{What: "error (proves nothing): " + err.Error()}
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	payload := make([]byte, 16)
	_, _ = rand.Read(payload)
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: 1, Seq: 1, Data: payload}}).Marshal(nil)
	if err != nil {
		return Outcome{What: "error (proves nothing): " + err.Error()}
	}
	if _, err := c.WriteTo(msg, &net.UDPAddr{IP: dst.AsSlice()}); err != nil {
		return p.judge(ctx, err)
	}
	// Stop waiting when ctx ends, whatever the deadline said.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return p.judge(ctx, err)
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && bytes.Equal(e.Data, payload) {
			return Outcome{What: "answered an echo"}
		}
	}
}
