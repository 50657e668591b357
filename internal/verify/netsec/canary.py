# canary: the target verify's network probes aim at. It answers HTTP on
# CANARY_HTTP_PORT with a body holding "sandbox-canary <token>", and DNS over
# UDP and TCP on CANARY_DNS_PORT with an A record of CANARY_DNS_ANSWER for any
# name, so that a reply proves the probe reached this resolver and not another.
# Standard library only; runs as `python3 -c` in the sandbox image.
import http.server
import os
import socket
import socketserver
import struct
import sys
import threading

TOKEN = os.environ.get("CANARY_TOKEN", "")
HTTP_PORT = int(os.environ.get("CANARY_HTTP_PORT", "8080"))
DNS_PORT = int(os.environ.get("CANARY_DNS_PORT", "53"))
ANSWER = socket.inet_aton(os.environ.get("CANARY_DNS_ANSWER", "192.0.2.53"))
BODY = ("sandbox-canary %s\n" % TOKEN).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, fmt, *args):
        sys.stderr.write("http %s %s\n" % (self.client_address[0], fmt % args))


def dns_reply(q):
    """Answers the first question of q with one A record; None when q is not a query."""
    if len(q) < 12:
        return None
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    if flags & 0x8000 or qd < 1:
        return None
    off = 12
    while off < len(q) and q[off] != 0:
        off += 1 + q[off]
    end = off + 5
    if end > len(q):
        return None
    question = q[12:end]
    hdr = struct.pack(">HHHHHH", qid, 0x8580 | (flags & 0x0100), 1, 1, 0, 0)
    rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + ANSWER
    return hdr + question + rr


def serve_udp(sock):
    while True:
        q, addr = sock.recvfrom(4096)
        r = dns_reply(q)
        if r:
            sys.stderr.write("dns/udp %s\n" % addr[0])
            sock.sendto(r, addr)


class TCPDNS(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(5)
        hdr = self.request.recv(2)
        if len(hdr) < 2:
            return
        (n,) = struct.unpack(">H", hdr)
        q = b""
        while len(q) < n:
            chunk = self.request.recv(n - len(q))
            if not chunk:
                return
            q += chunk
        r = dns_reply(q)
        if r:
            sys.stderr.write("dns/tcp %s\n" % self.client_address[0])
            self.request.sendall(struct.pack(">H", len(r)) + r)


class ThreadingTCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", DNS_PORT))
    tcp = ThreadingTCP(("0.0.0.0", DNS_PORT), TCPDNS)
    web = http.server.ThreadingHTTPServer(("0.0.0.0", HTTP_PORT), Handler)
    for target in (lambda: serve_udp(udp), tcp.serve_forever, web.serve_forever):
        threading.Thread(target=target, daemon=True).start()
    sys.stderr.write("canary: http :%d, dns :%d\n" % (HTTP_PORT, DNS_PORT))
    sys.stderr.flush()
    threading.Event().wait()


main()
