"""Writing a run's output files to disk, safely."""

from __future__ import annotations

import os
import secrets
import stat
from typing import Iterable, List, Union

from .results import OutputFile, Result


def save_files(files: Union[Result, Iterable[OutputFile]], directory: str) -> List[str]:
    """Write the output files that came back under ``directory`` (made if
    missing) and return the paths written; omitted and skipped files are
    left out.

    The paths come from the service and are treated as hostile: each stays
    inside ``directory``, no symlink already there is followed (a directory
    on the way that is a symlink fails with OSError), and a file is written
    beside its place and renamed over it, so a symlink or hard link there is
    replaced, never written through. An existing file is replaced.
    """
    if isinstance(files, Result):
        files = files.files
    os.makedirs(directory, exist_ok=True)
    saved: List[str] = []
    top = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for f in files:
            if not f.returned:
                continue
            _save(top, f)
            saved.append(f.path)
    finally:
        os.close(top)
    return saved


def _save(top: int, f: OutputFile) -> None:
    parts = f.path.split("/")
    if any(c in ("", ".", "..") for c in parts) or f.path.startswith("/"):
        raise ValueError(f"output file path {f.path!r} is not inside the directory")
    data = f.data()
    fds = []
    dirfd = top
    try:
        for c in parts[:-1]:
            try:
                os.mkdir(c, 0o755, dir_fd=dirfd)
            except FileExistsError:
                st = os.stat(c, dir_fd=dirfd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(f"{f.path}: {c} is in the way, not a directory") from None
            dirfd = os.open(c, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
            fds.append(dirfd)
        tmp = f".sandbox-{secrets.token_hex(6)}.tmp"
        w = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dirfd)
        try:
            with os.fdopen(w, "wb") as out:
                out.write(data)
            os.rename(tmp, parts[-1], src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dirfd)
            except OSError:
                pass
            raise
    finally:
        for fd in fds:
            os.close(fd)
