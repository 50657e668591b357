# inside: what a snippet can see of its own confinement (probes 5-11). Prints
# one JSON line; verify judges it. Reads and harmless attempts only: it opens
# /proc/sysrq-trigger for writing but never writes to it.
import ctypes
import errno
import json
import os
import platform
import socket
import stat
import threading

out = {"probe": "inside"}


def status(path="/proc/self/status"):
    d = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                d[k.strip()] = v.strip()
    except OSError as e:
        d["error"] = str(e)
    return d


def err(e):
    return {"errno": e.errno, "name": errno.errorcode.get(e.errno, "?"), "msg": str(e)[:120]}


# 5: identity
st = status()
out["uid"], out["euid"], out["gid"], out["egid"] = os.getuid(), os.geteuid(), os.getgid(), os.getegid()
out["groups"] = os.getgroups()
out["status_uid"], out["status_gid"] = st.get("Uid"), st.get("Gid")

# 6: capabilities in every thread (a second thread runs while we read)
ev = threading.Event()
th = threading.Thread(target=ev.wait)
th.start()
caps = []
for tid in sorted(os.listdir("/proc/self/task")):
    s = status("/proc/self/task/%s/status" % tid)
    caps.append({"tid": tid, **{k: s.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}})
ev.set()
th.join()
out["caps"] = caps
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.close()
    out["raw_socket"] = {"opened": True}
except OSError as e:
    out["raw_socket"] = err(e)

# 7, 8: ask the kernel, not /proc (gVisor omits lines)
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.restype = ctypes.c_int
libc.syscall.restype = ctypes.c_long
out["no_new_privs"] = libc.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS
out["prctl_seccomp"] = libc.prctl(21, 0, 0, 0, 0)  # PR_GET_SECCOMP: 2 = filter
out["status_nnp"], out["status_seccomp"] = st.get("NoNewPrivs"), st.get("Seccomp")
out["seccomp_filters"] = st.get("Seccomp_filters")
out["machine"] = platform.machine()
out["kernel"] = platform.release()
try:
    with open("/proc/version") as f:
        out["proc_version"] = f.read().strip()[:200]
except OSError as e:
    out["proc_version"] = str(e)
KEYCTL = {"x86_64": 250, "aarch64": 219, "arm64": 219, "s390x": 280, "ppc64le": 310}.get(platform.machine())
if KEYCTL is None:
    out["keyctl"] = {"skipped": "unknown syscall number on " + platform.machine()}
else:
    ctypes.set_errno(0)
    r = libc.syscall(KEYCTL, 0, ctypes.c_long(-3), 0)  # KEYCTL_GET_KEYRING_ID, session keyring, no create
    e = ctypes.get_errno()
    out["keyctl"] = {"ret": r, "errno": e, "name": errno.errorcode.get(e, "")}

# 9: service-account token
mounts = []
try:
    with open("/proc/self/mountinfo") as f:
        mounts = f.read().splitlines()
except OSError:
    pass
out["token_paths"] = [p for p in ("/var/run/secrets/kubernetes.io/serviceaccount", "/run/secrets/kubernetes.io/serviceaccount",
                                   "/var/run/secrets/tokens", "/var/run/secrets") if os.path.exists(p)]
out["token_mounts"] = [m for m in mounts if "serviceaccount" in m or "kube-api-access" in m or "/secrets" in m]
out["token_env"] = sorted(k for k in os.environ if "TOKEN" in k.upper() or k.startswith("KUBERNETES_"))

# 10: runtime sockets, host block devices, sysrq
RUNTIME = ("containerd.sock", "docker.sock", "crio.sock", "cri-dockerd.sock", "podman.sock", "dockershim.sock", "kubelet.sock")
socks = []
for root in ("/run", "/var/run", "/var/lib", "/tmp", "/host", "/mnt", "/"):
    base = root.count("/")
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
        if dirpath.startswith(("/proc", "/sys")) or dirpath.count("/") - base > 3:
            dirnames[:] = []
            continue
        if root == "/":
            dirnames[:] = []  # only the top level of /
        for n in filenames + dirnames:
            p = os.path.join(dirpath, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    socks.append(p)
            except OSError:
                pass
out["sockets"] = sorted(set(socks))
out["runtime_sockets"] = [p for p in out["sockets"] if p.endswith(RUNTIME)] + \
    [m for m in mounts if any(r in m for r in RUNTIME)]
blk, sensitive = [], []
for dirpath, dirnames, filenames in os.walk("/dev", onerror=lambda e: None):
    for n in filenames:
        p = os.path.join(dirpath, n)
        try:
            if stat.S_ISBLK(os.lstat(p).st_mode):
                blk.append(p)
        except OSError:
            pass
for p in ("/dev/mem", "/dev/kmem", "/dev/port"):
    if os.path.exists(p):
        sensitive.append(p)
out["block_devices"], out["sensitive_devices"] = blk, sensitive
out["kmsg"] = os.path.exists("/dev/kmsg")
try:
    fd = os.open("/proc/sysrq-trigger", os.O_WRONLY)
    os.close(fd)  # opened: that is the finding; nothing is written
    out["sysrq"] = {"opened": True}
except OSError as e:
    out["sysrq"] = err(e)

# 11: read-only root, writable only the working directory and /tmp
sv = os.statvfs("/")
out["root_readonly_flag"] = bool(sv.f_flag & os.ST_RDONLY)
out["root_mount"] = [m for m in mounts if len(m.split()) > 4 and m.split()[4] == "/"][:1]
out["cwd"] = os.getcwd()
tag = ".verify-%d" % os.getpid()
writes = {}
for d in (os.getcwd(), "/tmp", "/", "/etc", "/usr", "/usr/local/bin", "/var", "/var/tmp", "/opt", "/home", "/root", "/run", "/dev/shm"):
    p = os.path.join(d, tag)
    try:
        with open(p, "w") as f:
            f.write("x")
        os.unlink(p)
        writes[d] = "written"
    except OSError as e:
        writes[d] = errno.errorcode.get(e.errno, str(e.errno))
out["writes"] = writes

print(json.dumps(out))
