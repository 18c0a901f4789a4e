"""Files only toolrouter's own user may read: the state directory and what it holds.

The database, its write-ahead log, key and password files are 0600 and their directories
0700, made so from the start (never created readable and tightened later).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def create_private_files() -> None:
    """Make every file and directory this process creates from now on its owner's alone:
    libraries write into the state directory too (beat's schedule, metrics' samples)."""
    os.umask(0o077)


def private_dir(path: Path) -> Path:
    """``path`` as a directory (made if missing) that only its owner may enter."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _tighten(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` as an existing file (made empty if missing) that only its owner may read."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    _tighten(path, FILE_MODE)
    return path


def _tighten(path: Path, mode: int) -> None:
    """Remove group and other access from ``path`` if it has any and we own it."""
    with contextlib.suppress(OSError):
        info = path.stat()
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
            path.chmod(stat.S_IMODE(info.st_mode) & ~0o077 | (mode & 0o700))
