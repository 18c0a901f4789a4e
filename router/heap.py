"""The cyclic garbage collector and the objects a long-lived process builds at start-up.

A process of ours imports a few hundred thousand objects (FastAPI, pydantic, SQLAlchemy,
Celery, the MCP SDK) that live as long as it does. Every full collection walks all of them,
a pause that stalls whatever the process is doing, and the work that allocates most (a
batch of thousands of calls) triggers the most collections. Frozen once start-up is done,
they are left out of every later collection; what requests and tasks allocate is
collected as before.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> None:
    """Collect start-up's garbage, then exempt every object alive now from collection.

    Called again later, it adds what was built since. In a process about to fork, the
    children inherit the frozen set, and their collections leave the shared pages alone.
    """
    gc.collect()
    gc.freeze()
