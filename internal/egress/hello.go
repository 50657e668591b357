package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxHello bounds what the gateway reads of a client's first TLS flight
// before it has the ClientHello: a ClientHello with post-quantum key shares
// is under 2 KiB, and a TLS record at most 16 KiB plus its header.
const maxHello = 64 << 10

// errHelloRead stops the handshake once the ClientHello is parsed.
var errHelloRead = errors.New("client hello read")

// readHello reads the ClientHello that opens a TLS connection from r and
// returns its server name (SNI, "" without one) and every byte read, which
// the caller forwards unchanged: the gateway parses the hello with the
// standard library's own parser and never answers it, so TLS stays between
// the tool and the server.
func readHello(r io.Reader) (sni string, raw []byte, err error) {
	var buf bytes.Buffer
	conn := &helloConn{r: io.TeeReader(io.LimitReader(r, maxHello), &buf)}
	var hello *tls.ClientHelloInfo
	srv := tls.Server(conn, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errHelloRead
	}})
	err = srv.Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("no hello")
		}
		return "", buf.Bytes(), fmt.Errorf("not a TLS ClientHello: %w", err)
	}
	return hello.ServerName, buf.Bytes(), nil
}

// helloConn is the read side of a connection for tls.Server; what the
// server would write (an alert, once the hello is refused) goes nowhere.
type helloConn struct{ r io.Reader }

func (c *helloConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *helloConn) Close() error                     { return nil }
func (c *helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *helloConn) SetDeadline(time.Time) error      { return nil }
func (c *helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c *helloConn) SetWriteDeadline(time.Time) error { return nil }
