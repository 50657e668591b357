"""The bearer token sent with each request: the agent's projected
ServiceAccount token, by which the service knows who is calling."""

from __future__ import annotations

import os
from typing import NoReturn, Optional

from .errors import SandboxUnavailable

TOKEN_FILE_ENV = "SANDBOX_TOKEN_FILE"

# Where an agent's pod mounts its projected token for the service (audience
# "sandbox"), and so where it is looked for when SANDBOX_TOKEN_FILE is unset.
DEFAULT_TOKEN_FILE = "/var/run/secrets/sandbox/token"

# A ServiceAccount token is a kilobyte or two; a wrong path (a log,
# /dev/zero) fails at once instead of being read without end or sent.
MAX_TOKEN = 64 << 10


class TokenFile:
    """The token's file, read again for each request: the kubelet rotates a
    projected token in place, so one read at the start would go stale within
    the hour. Only the path is kept, never the token."""

    def __init__(self, path: str, required: bool) -> None:
        self.path = path
        self.required = required

    @classmethod
    def resolve(cls, path: Optional[str]) -> TokenFile:
        """The file named by path, else by SANDBOX_TOKEN_FILE, each of which
        must hold a token; else DEFAULT_TOKEN_FILE, which may be absent."""
        path = path or os.environ.get(TOKEN_FILE_ENV)
        if path:
            return cls(path, required=True)
        return cls(DEFAULT_TOKEN_FILE, required=False)

    def read(self) -> Optional[str]:
        """The token, or None when the default file does not exist.

        Raises SandboxUnavailable when the file cannot be read or holds no
        token: the request must not go out without the caller's identity.
        The message never holds the token.
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_TOKEN + 1)
        except FileNotFoundError:
            if not self.required:
                return None
            self._fail("no such file")
        except OSError as e:
            self._fail(e.strerror or type(e).__name__)
        if len(data) > MAX_TOKEN:
            self._fail(f"over {MAX_TOKEN} bytes, not a token")
        token = data.strip()
        if not token:
            self._fail("empty")
        # A bearer token is printable ASCII without spaces; anything else
        # would make a broken header (and http.client's error would show it).
        if any(b <= 0x20 or b > 0x7E for b in token):
            self._fail("not a bearer token (it holds a space, a control character or non-ASCII)")
        return token.decode("ascii")

    def _fail(self, why: str) -> NoReturn:
        raise SandboxUnavailable(f"sandbox token file {self.path}: {why}; nothing was sent")
