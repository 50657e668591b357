# toolenv: what a tool call's process holds -- its ids, its environment's
# names, any service-account token in reach -- and a marker in /tmp for the
# one-use check. Run through builtins:exec in the allowed image, with
# PARAMS_B64 (canary_name, marker) prepended by verify.
import base64
import json
import os
import socket

P = json.loads(base64.b64decode(PARAMS_B64))
SA_DIRS = ["/var/run/secrets/kubernetes.io/serviceaccount", "/run/secrets/kubernetes.io/serviceaccount",
           "/var/run/secrets/tokens"]

out = {"probe": "toolenv", "hostname": socket.gethostname(), "cwd": os.getcwd(),
       "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid(),
       "groups": os.getgroups(), "env_names": sorted(os.environ),
       "canary": os.environ.get(P["canary_name"]),
       "token_paths": [d for d in SA_DIRS if os.path.exists(d)]}
try:
    with open("/proc/self/mountinfo") as f:
        out["token_mounts"] = [line.strip() for line in f if "serviceaccount" in line or "/secrets/" in line]
except OSError as e:
    out["mountinfo_error"] = str(e)

marker = "/tmp/verify-" + P["marker"]
try:
    with open(marker, "w") as f:
        f.write(P["marker"])
    with open(marker) as f:
        out["marker"] = {"path": marker, "written": f.read() == P["marker"]}
except OSError as e:
    out["marker"] = {"path": marker, "written": False, "error": str(e)}
print(json.dumps(out))
