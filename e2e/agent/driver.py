"""Runs in an agent pod (another namespace, SANDBOX_URL and AGENT_IMAGE set):
calls the decorated tools through the service and prints one JSON line."""

import json
import socket

from sandbox_client import RemoteToolError
from tools.decorated import explode, shout

out = {"probe": "agent", "host": socket.gethostname()}
out["shout"] = shout("hello")
try:
    explode("on purpose")
    out["explode"] = {"raised": False}
except RemoteToolError as e:
    out["explode"] = {"raised": True, "type": e.type, "message": e.message, "traceback": e.traceback,
                      "sandbox_id": getattr(e.result, "sandbox_id", None)}
print(json.dumps(out))
