"""Runs in an agent pod (another namespace, SANDBOX_URL and AGENT_IMAGE set):
calls the decorated tools through the service and prints one JSON line."""

import json
import os
import socket
import time
import urllib.request

from sandbox_client import RemoteToolError
from tools.decorated import explode, shout


def wait_for_service(deadline_s: float = 30.0) -> None:
    """A new pod's address reaches the network policy engine's allow-lists a
    moment after the pod starts; until then its packets to the service are
    rejected (connection refused). The agent under test fails closed on the
    first refusal, as it must, so the driver waits for the path first."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(os.environ["SANDBOX_URL"].rstrip("/") + "/readyz", timeout=2):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


wait_for_service()
out = {"probe": "agent", "host": socket.gethostname()}
out["shout"] = shout("hello")
try:
    explode("on purpose")
    out["explode"] = {"raised": False}
except RemoteToolError as e:
    out["explode"] = {"raised": True, "type": e.type, "message": e.message, "traceback": e.traceback,
                      "sandbox_id": getattr(e.result, "sandbox_id", None)}
print(json.dumps(out))
