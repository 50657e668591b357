# verify's egress-by-name probe (toolcalls/egress-by-name and the rest):
# run in verify's control pod ("control": direct, with the cluster DNS) and
# in a tool pod whose image has names ("tool": through its HTTPS_PROXY).
# PARAMS_B64, a JSON object, is prepended by verify. Standard library only;
# prints one JSON line {"probe": "egress", ...}.
import base64, json, os, socket, ssl, struct, urllib.error, urllib.request

P = json.loads(base64.b64decode(PARAMS_B64))
T = P.get("timeout", 5)


def hostport(s):
    h, _, p = s.rpartition(":")
    return h.strip("[]"), int(p)


def err(e):
    return "%s: %s" % (type(e).__name__, e)


def insecure():
    # The stand-ins' certificates are self-signed: what is proven is the
    # path, not the PKI. The hello still names the host (SNI).
    c = ssl.create_default_context()
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE
    return c


def get(target, proxy):
    host, port = hostport(target)
    hs = [urllib.request.HTTPSHandler(context=insecure()), urllib.request.ProxyHandler({"https": proxy} if proxy else {})]
    try:
        r = urllib.request.build_opener(*hs).open("https://%s:%d/" % (host, port), timeout=T)
        body = r.read(65536).decode("utf-8", "replace")
        return {"ok": True, "status": r.status, "token": P["token"] in body}
    except urllib.error.HTTPError as e:
        return {"ok": False, "status": e.code, "error": err(e)}
    except Exception as e:
        return {"ok": False, "error": err(e)}


def tunnel(target, sni, proxy):
    # CONNECT target through the proxy by hand, then TLS naming sni.
    out = {}
    try:
        ph, pp = hostport(proxy.split("://", 1)[-1].rstrip("/"))
        s = socket.create_connection((ph, pp), timeout=T)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            b = s.recv(4096)
            if not b:
                break
            head += b
        out["connect"] = head.split(b"\r\n", 1)[0].decode("latin-1")
        if out["connect"].split(" ")[1:2] != ["200"]:
            return out
        t = insecure().wrap_socket(s, server_hostname=sni)
        out["handshake"] = True
        t.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % sni).encode())
        body = b""
        while len(body) < 1 << 20:
            b = t.recv(65536)
            if not b:
                break
            body += b
        out["token"] = P["token"].encode() in body
    except Exception as e:
        out["error"] = err(e)
    return out


def lookup(name):
    try:
        return {"addrs": sorted({a[4][0] for a in socket.getaddrinfo(name, None)})}
    except Exception as e:
        return {"error": err(e)}


def dns_query(server, name):
    # One A query over UDP, straight to the server: does anything answer?
    if not server:
        return {"answered": False, "error": "no server"}
    h, p = hostport(server)
    q = struct.pack(">HHHHHH", 0x5EED, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    try:
        s = socket.socket(socket.AF_INET6 if ":" in h else socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(q, (h, p))
        return {"answered": True, "bytes": len(s.recv(4096))}
    except Exception as e:
        return {"answered": False, "error": err(e)}


def direct(addr):
    try:
        socket.create_connection(hostport(addr), timeout=3).close()
        return {"ok": True}
    except Exception as e:
        return {"ok": False, "error": err(e)}


allowed_host = hostport(P["allowed"])[0]
other_host = hostport(P["other"])[0]
out = {"probe": "egress", "mode": P["mode"]}
if P["mode"] == "control":
    out["allowed"] = get(P["allowed"], None)
    out["other"] = get(P["other"], None)
    out["lookup_allowed"] = lookup(allowed_host)
    out["rebind"] = {t: lookup(hostport(t)[0]) for t in P["rebind"]}
    addrs = out["lookup_allowed"].get("addrs") or []
    if addrs:
        a = addrs[0]
        out["direct_addr"] = ("[%s]:%d" if ":" in a else "%s:%d") % (a, hostport(P["allowed"])[1])
        out["direct"] = direct(out["direct_addr"])
else:
    proxy = os.environ.get("HTTPS_PROXY", "")
    out["proxy"] = proxy
    out["allowed"] = get(P["allowed"], proxy)
    out["other"] = get(P["other"], proxy)
    out["rebind"] = {t: get(t, proxy) for t in P["rebind"]}
    out["sni_same"] = tunnel(P["allowed"], allowed_host, proxy) if proxy else {"error": "no proxy"}
    out["sni_other"] = tunnel(P["allowed"], other_host, proxy) if proxy else {"error": "no proxy"}
    out["lookup_allowed"] = lookup(allowed_host)
    if P.get("direct"):
        out["direct"] = direct(P["direct"])
out["dns"] = dns_query(P.get("dns_server"), allowed_host)
print(json.dumps(out))
