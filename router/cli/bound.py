"""A command that gets SIGTERM when the `toolrouter up` that started it dies, however it dies.

`up` starts each process in a session of its own (so a Ctrl-C reaches `up` alone, which
stops them warm) and stops them itself; killed with SIGKILL (or by the OOM killer) it
cannot, and they would go on serving, unseen by `toolrouter status`. Linux lets a process
ask for a signal when its parent dies (``PR_SET_PDEATHSIG``), kept across ``exec``: this
module asks for it, then becomes the command. Elsewhere the command runs as before.

    python -m router.cli.bound <parent pid> <command> [args...]
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def bound_to_this_process(argv: list[str]) -> list[str]:
    """``argv`` run so that it gets SIGTERM when this process dies (on Linux)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-m", __name__, str(os.getpid()), *argv]


def main(args: list[str]) -> None:
    parent, argv = int(args[0]), args[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # The parent may have died before the request was made: then no signal will come.
    if os.getppid() != parent:
        sys.exit(f"not started: its parent {parent} has already exited")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
