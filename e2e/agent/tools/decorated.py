"""Tools the agent sends to its sandbox with sandbox_client's @sandboxed:
in the agent's process the decorator posts the call; in the tool pod the
runner calls the function under it."""

import socket

from sandbox_client import sandboxed


@sandboxed(timeout_s=30)
def shout(text):
    """Returns its argument in capitals, and the host it ran on."""
    return {"text": text.upper(), "host": socket.gethostname()}


@sandboxed
def explode(message):
    """Raises, so that the agent gets a RemoteToolError."""
    raise RuntimeError("exploded: " + message)
