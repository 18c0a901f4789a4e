"""Running calls and recovering lost work, without Celery; ``workers.tasks`` calls it.

- ``executor``: ``Executor``, the entry points the tasks call;
- ``call_runner``: one run of one call (claim, approval check, handler, retry, fallback);
- ``shared_message``: the calls of one message in turn, their outcomes held together;
- ``recovery``: the reaper's lost runs and the reconciler's unsent calls;
- ``ledger``: claims and outcomes in the database, fenced on the attempt;
- ``run_outcome``: ``RunOutcome``, what became of a call.
"""

from .executor import Executor
from .ledger import DEFAULT_TIMEOUT_S, Finished, Ledger
from .run_outcome import NOT_RUN, RunOutcome
from .shared_message import RENEW_AFTER_MS

__all__ = [
    # Running calls
    "Executor",
    "RunOutcome",
    "NOT_RUN",
    # Recording outcomes
    "Ledger",
    "Finished",
    # Limits
    "DEFAULT_TIMEOUT_S",
    "RENEW_AFTER_MS",
]
