"""An atomic write on a local disk (a temporary file, then a rename): :func:`write_atomically`, through the two
calls of :class:`LocalFiles`, a seam of its own so that fault drills can pass theirs (a kill before the
rename...).
"""

from __future__ import annotations

import os
import uuid
from typing import BinaryIO

from airflow_pydantic_ai.durable.storage.identity import make_private_folders

__all__ = ["LocalFiles", "write_atomically"]


class LocalFiles:
    """The local-disk calls of an atomic write. Fault drills pass their own (a kill before the rename...)."""

    def create(self, path: str) -> BinaryIO:
        """A new file readable by its owner only; fails if ``path`` exists."""
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return os.fdopen(descriptor, "wb")

    def replace(self, source: str, target: str) -> None:
        os.replace(source, target)


def write_atomically(files: LocalFiles, path: str, data: bytes, *, created: list[str], sync: bool = False) -> None:
    """Temporary file, then rename: atomic against a crash of the process at any point. The folders it creates
    are added to ``created`` as they are made (also when the write then fails).

    ``sync``: also ``fsync`` the file before the rename and the folder after it, so that the object
    survives a power loss too. Single entries are not synced (an ``fsync`` costs 0.5-10 ms, more
    than the rest of a step's recording): the page cache keeps them through a kill of the process,
    and a power loss can only tear or drop the last ones, which their checksum then rejects (the
    step runs live). A pack, written once at the end of a try, is synced.
    """
    directory = os.path.dirname(path)
    created.extend(make_private_folders(directory))
    temporary = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
    try:
        handle = files.create(temporary)
    except FileNotFoundError:
        # Another try of this task instance removed the folder it had left empty just now: once more.
        created.extend(make_private_folders(directory))
        handle = files.create(temporary)
    try:
        with handle:
            handle.write(data)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        files.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    if sync:
        folder = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
