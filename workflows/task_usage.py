"""What one task cost the thread that ran it: CPU seconds (user, system) and page faults.

Wall seconds alone hide why a task was slow.  On a VM the first touch of fresh memory is dear (about 7 us a
page here), so the same pass run by a worker whose heap has not grown yet can take four times as long, all of
it in the kernel (the verifier's operand check on large_matmul: 0.18 s of user time, 0.55 s of system time,
81k faults on the second worker).  ``build-trace.json`` shows these figures beside each task's wall.
"""

from __future__ import annotations

import functools
import resource
import sys
from typing import Any, Callable

# RUSAGE_THREAD is Linux's; elsewhere the figures are the whole process's (still right in-process, and a
# worker runs one task at a time)
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def measured(task: Callable[..., Any]) -> Callable[..., Any]:
    """``task`` (returning a dict) with ``usage`` added to its answer: ``cpu_user_s``, ``cpu_sys_s``,
    ``page_faults``."""
    if not sys.platform.startswith("linux"):
        return task

    @functools.wraps(task)
    def run(*args: Any, **kwargs: Any) -> Any:
        before = resource.getrusage(_WHO)
        answer = task(*args, **kwargs)
        if isinstance(answer, dict) and "usage" not in answer:
            after = resource.getrusage(_WHO)
            answer["usage"] = {"cpu_user_s": round(after.ru_utime - before.ru_utime, 4),
                               "cpu_sys_s": round(after.ru_stime - before.ru_stime, 4),
                               "page_faults": after.ru_minflt - before.ru_minflt + after.ru_majflt - before.ru_majflt}
        return answer
    return run
