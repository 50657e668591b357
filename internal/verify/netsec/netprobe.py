# netprobe: the network probe `sandbox verify` runs, unchanged, in the sandbox
# (through POST /v1/execute) and in the unrestricted control pod (python3 -).
# Standard library only. Params arrive as base64 JSON in PARAMS_B64 (prepended
# by the Go side); the answer is one JSON line on stdout.
import base64
import json
import os
import random
import socket
import struct
import threading
import time

PARAMS = json.loads(base64.b64decode(PARAMS_B64).decode())  # noqa: F821 (set by the Go side)


def errstr(e):
    s = type(e).__name__
    no = getattr(e, "errno", None)
    if no:
        s += "(%s)" % no
    msg = str(e)
    if msg:
        s += ": " + msg[:160]
    return s


def own_ips():
    ips = set()
    host = socket.gethostname()
    try:
        with open("/etc/hosts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and host in parts[1:]:
                    ips.add(parts[0])
    except OSError:
        pass
    try:
        # A connected UDP socket sends nothing; it only asks the kernel for a route.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("192.0.2.1", 9))
        ips.add(s.getsockname()[0])
        s.close()
    except OSError:
        pass
    ips.discard("127.0.0.1")
    return ips


def resolvers():
    out = []
    try:
        with open("/etc/resolv.conf") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    out.append(parts[1])
    except OSError:
        pass
    return out


def dns_query(qname, qtype=1):
    qid = random.randrange(1, 65535)
    hdr = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q = b""
    for label in qname.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode("ascii")
    return qid, hdr + q + b"\x00" + struct.pack(">HH", qtype, 1)


def skip_name(data, off):
    while True:
        if off >= len(data):
            raise ValueError("truncated name")
        n = data[off]
        if n == 0:
            return off + 1
        if n & 0xC0 == 0xC0:
            return off + 2
        off += 1 + n


def dns_parse(qid, data):
    """Returns (rcode, [A addresses]); raises ValueError on anything but a reply to qid."""
    if len(data) < 12:
        raise ValueError("short reply (%d bytes)" % len(data))
    rid, flags, qd, an, _, _ = struct.unpack(">HHHHHH", data[:12])
    if rid != qid:
        raise ValueError("reply id %d, asked %d" % (rid, qid))
    if not flags & 0x8000:
        raise ValueError("not a reply")
    off = 12
    for _ in range(qd):
        off = skip_name(data, off) + 4
    addrs = []
    for _ in range(an):
        off = skip_name(data, off)
        typ, _, _, rdlen = struct.unpack(">HHIH", data[off:off + 10])
        off += 10
        if typ == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(data[off:off + 4]))
        off += rdlen
    return flags & 0xF, addrs


def dns_answer(r, rcode, addrs):
    r["answered"] = True
    r["detail"] = "rcode %d, A %s" % (rcode, ",".join(addrs) or "none")
    r["addrs"] = addrs
    r["rcode"] = rcode


def attempt_dns_udp(t, timeout):
    r = {}
    qid, pkt = dns_query(t["qname"])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.connect((t["host"], t["port"]))  # connected: an ICMP reject shows as ECONNREFUSED
        s.send(pkt)
        end = time.monotonic() + timeout
        while True:
            s.settimeout(max(0.01, end - time.monotonic()))
            data = s.recv(4096)
            try:
                rcode, addrs = dns_parse(qid, data)
            except ValueError as e:
                r["error"] = errstr(e)
                continue
            r["reached"] = True
            dns_answer(r, rcode, addrs)
            return r
    finally:
        s.close()


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


def attempt_dns_tcp(t, timeout):
    r = {}
    qid, pkt = dns_query(t["qname"])
    s = socket.create_connection((t["host"], t["port"]), timeout=timeout)
    r["reached"] = True  # a TCP handshake with a foreign resolver is already a reach
    try:
        s.sendall(struct.pack(">H", len(pkt)) + pkt)
        (n,) = struct.unpack(">H", recv_exact(s, 2))
        rcode, addrs = dns_parse(qid, recv_exact(s, n))
        dns_answer(r, rcode, addrs)
    except (OSError, ValueError) as e:
        r["error"] = errstr(e)
    finally:
        s.close()
    return r


def attempt_resolve(t, timeout):
    """Looks qname up the way any program in the pod would (getaddrinfo, so
    through the pod's own /etc/resolv.conf), once, in a thread of its own so
    that a resolver that never answers cannot hold the probe past timeout."""
    r = {}
    box = {}

    def lookup():
        t0 = time.monotonic()
        try:
            infos = socket.getaddrinfo(t["qname"], None, 0, socket.SOCK_STREAM)
            box["addrs"] = sorted({i[4][0] for i in infos})
        except Exception as e:  # noqa: BLE001 (every failure is evidence)
            box["error"] = errstr(e)
        box["ms"] = int((time.monotonic() - t0) * 1000)

    th = threading.Thread(target=lookup, daemon=True)
    th.start()
    th.join(timeout)
    if "ms" not in box:
        r["error"] = "no answer within %d ms" % int(timeout * 1000)
        r["lookup_ms"] = int(timeout * 1000)
        return r
    r["lookup_ms"] = box["ms"]
    if box.get("addrs"):
        r["reached"] = True
        r["answered"] = True
        r["addrs"] = box["addrs"]
        r["detail"] = "resolved to %s in %d ms" % (",".join(box["addrs"]), box["ms"])
    else:
        r["error"] = box.get("error", "no address")
        r["detail"] = "failed in %d ms: %s" % (box["ms"], r["error"])
    return r


def gateway6():
    """The IPv6 default route's next hop (a link-local address, scoped to
    its interface), from /proc/net/ipv6_route; None without one."""
    try:
        with open("/proc/net/ipv6_route") as f:
            for line in f:
                p = line.split()
                if len(p) >= 10 and p[0] == "0" * 32 and p[1] == "00" and p[4] != "0" * 32:
                    hop = ":".join(p[4][i:i + 4] for i in range(0, 32, 4))
                    addr = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, hop))
                    return addr + ("%" + p[9] if addr.startswith("fe80") else "")
    except OSError:
        pass
    return None


def attempt_tcp(t, timeout):
    s = socket.create_connection((t["host"], t["port"]), timeout=timeout)
    s.close()
    return {"reached": True, "detail": "TCP handshake completed"}


def attempt_http(t, timeout):
    r = {}
    s = socket.create_connection((t["host"], t["port"]), timeout=timeout)
    r["reached"] = True
    data = b""
    try:
        s.settimeout(timeout)
        req = "GET %s HTTP/1.0\r\nHost: %s\r\nUser-Agent: sandbox-verify\r\n\r\n" % (t.get("path") or "/", t["host"])
        s.sendall(req.encode())
        while len(data) < 16384:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        r["error"] = errstr(e)
    finally:
        s.close()
    if data.startswith(b"HTTP/"):
        r["answered"] = True
        r["detail"] = data.split(b"\r\n", 1)[0].decode("latin-1")[:80]
    elif data:
        r["detail"] = "non-HTTP answer of %d bytes" % len(data)
    tok = t.get("token")
    if tok and tok.encode() in data:
        r["token"] = True
    return r


def attempt_icmp(t, timeout):
    """One echo request through an unprivileged ICMP socket (no capability
    needed where the network namespace's ping_group_range admits the
    process's group), carrying a random payload; the reply must carry it
    back. Refused at socket(): the pod's own range closes ICMP."""
    v6 = ":" in t["host"]
    fam, proto, req, rep = ((socket.AF_INET6, socket.IPPROTO_ICMPV6, 128, 129) if v6
                            else (socket.AF_INET, socket.IPPROTO_ICMP, 8, 0))
    payload = os.urandom(16)
    s = socket.socket(fam, socket.SOCK_DGRAM, proto)
    try:
        s.settimeout(timeout)
        # The kernel fills the identifier and the checksum of a ping socket.
        s.sendto(struct.pack(">BBHHH", req, 0, 0, 0, 1) + payload, (t["host"], 0))
        end = time.monotonic() + timeout
        while True:
            s.settimeout(max(0.01, end - time.monotonic()))
            data = s.recv(2048)
            if len(data) >= 8 and data[0] == rep and data[8:] == payload:
                return {"reached": True, "answered": True, "detail": "echo answered with its payload"}
    finally:
        s.close()


ATTEMPT = {"http": attempt_http, "icmp": attempt_icmp, "tcp": attempt_tcp, "dns-udp": attempt_dns_udp, "dns-tcp": attempt_dns_tcp,
           "resolve": attempt_resolve}
SELF = own_ips()
RESOLVERS = resolvers()


def done(t, out):
    if not out["reached"]:
        return False
    if t["kind"].startswith("dns") or t["kind"] == "resolve":
        return out["answered"] and (not t.get("token") or out["token"])
    if t.get("token"):
        return out["token"]
    return True


def run_target(t, out):
    out.update({"name": t["name"], "kind": t["kind"], "host": t["host"], "port": t["port"],
                "reached": False, "answered": False, "token": False, "attempts": 0, "errors": {}})
    if t["host"] == "@resolv":
        if not RESOLVERS:
            out["error"] = "no nameserver in /etc/resolv.conf"
            return
        out["host"] = t["host"] = RESOLVERS[0]
    if t["host"] == "@gw6":
        gw = gateway6()
        if not gw:
            out["error"] = "no IPv6 default route"
            out["skipped"] = "no IPv6 default route"
            return
        out["host"] = t["host"] = gw
    if t.get("skip_self") and t["host"] in SELF:
        out["skipped"] = "own address"
        return
    start = time.monotonic()
    deadline = start + float(t.get("deadline_s", 3))
    interval = float(t.get("interval_s", 0.25))
    while True:
        out["attempts"] += 1
        a0 = time.monotonic()
        try:
            budget = deadline - a0 if t["kind"] == "resolve" else min(float(t.get("attempt_s", 1.0)), deadline - a0)
            r = ATTEMPT[t["kind"]](t, max(0.2, budget))
        except Exception as e:  # noqa: BLE001 (every failure is evidence)
            r = {"error": errstr(e)}
        if r.get("error"):
            out["errors"][r["error"]] = out["errors"].get(r["error"], 0) + 1
            out["error"] = r["error"]
        for k in ("reached", "answered", "token"):
            if r.get(k) and not out[k]:
                out[k] = True
                out[k + "_ms"] = int((time.monotonic() - start) * 1000)
        for k in ("detail", "addrs", "rcode", "lookup_ms"):
            if k in r:
                out[k] = r[k]
        # For DNS, the token is the address only our canary answers with.
        if (t["kind"].startswith("dns") or t["kind"] == "resolve") and t.get("token") and t["token"] in r.get("addrs", []) and not out["token"]:
            out["token"] = True
            out["token_ms"] = int((time.monotonic() - start) * 1000)
        if done(t, out) or t["kind"] == "resolve" or time.monotonic() + interval >= deadline:
            break
        time.sleep(interval)
    out["elapsed_ms"] = int((time.monotonic() - start) * 1000)


def main():
    targets = PARAMS.get("targets", [])
    outs = [{} for _ in targets]
    threads = [threading.Thread(target=run_target, args=(t, o)) for t, o in zip(targets, outs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps({"probe": "net", "version": 1, "hostname": socket.gethostname(), "self": sorted(SELF),
                      "resolvers": RESOLVERS, "uid": os.getuid(), "results": outs}))


main()
