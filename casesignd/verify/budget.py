"""Verify's budgets and its share of the CPU: what one document may cost, and how many
documents one tenant may have validated at once.

A signed PDF is untrusted input, and validating it is pure-Python work that grows
with what the document holds: one with 3,150 signature fields, each a copy of a real
CMS, cost 12.8 s of CPU; one with a 4.7 MB /Contents took a process to 958 MiB.
So each document has budgets (``[validation.budget]``):

- signatures: more than ``max_signatures`` signature fields (in any revision's form)
  is refused before any is parsed (``limit_exceeded``, ``too_many_signatures``);
- one signature's /Contents: more than ``max_contents_bytes`` decoded is refused
  before pyHanko's parser reads it (``limit_exceeded``, ``contents_too_large``: a CMS
  with its certificates and revocation data is tens of kilobytes); one found only
  once parsed (in an object stream) is not validated (INDETERMINATE);
- CPU: past ``max_cpu_s`` of the process's CPU time the validation stops
  (``limit_exceeded``, ``validation_time``); one signature past
  ``max_cpu_per_signature_s`` is left unchecked (INDETERMINATE, GENERIC) and the next
  one validated; the lane's ``workers.max_run_s`` stays the backstop that kills the
  process;
- decoded bytes: pyHanko's document decode budget, ``max_decoded_bytes``
  (``limit_exceeded``, ``decompression_bomb``);
- memory: the verify processes' address space is capped at ``max_memory_bytes``
  (``limit_exceeded``, ``memory_budget``).

Verify requests run in processes of their own (``processes``, at a lower priority,
like the batch processes), never in the batch or kiosk ones, so a burst of them
delays neither jobs nor kiosk requests; one tenant may use ``process_share`` of them
at once (0: all with one tenant, half with several) and have ``max_inflight_per_tenant``
requests in flight (then 503 ``busy`` for that tenant alone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

from casesignd.core.errors import LimitExceeded
from casesignd.core.verify_budget import MiB, VerifyBudget

__all__ = ["MiB", "VerifyBudget"]


class _OutOfCpu(BaseException):
    """Raised from the CPU timer's signal handler. A BaseException, so that no
    ``except Exception`` on the way (pyHanko's, this package's) turns it into a
    finding of one signature."""


class SignatureOutOfCpu(Exception):  # noqa: N818 - a budget's end, not a fault
    """One signature took more than its CPU budget; the document's is not spent."""


# The process CPU time (time.process_time) at which the document's budget ends, while
# cpu_budget runs: signature_budget arms the one timer for whichever ends first.
_doc_deadline: float | None = None


def _can_time() -> bool:
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


def _arm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_PROF, max(seconds, 0.001))


@contextlib.contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Stop the block with ``limit_exceeded`` (``validation_time``) once this process
    has spent ``seconds`` more of CPU time (ITIMER_PROF counts user and system time).
    Only in the main thread (signals are delivered there); elsewhere a no-op."""
    global _doc_deadline
    if not _can_time():
        yield
        return

    def on_timer(signum: int, frame: FrameType | None) -> None:
        raise _OutOfCpu

    previous = signal.signal(signal.SIGPROF, on_timer)
    _doc_deadline = time.process_time() + seconds
    _arm(seconds)
    try:
        yield
    except _OutOfCpu:
        raise LimitExceeded(f"validating its signatures takes more than {seconds:g} s of CPU "
                            "time", reason="validation_time") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        _doc_deadline = None


@contextlib.contextmanager
def signature_budget(seconds: float) -> Iterator[None]:
    """Within :func:`cpu_budget`: raise SignatureOutOfCpu once the block has spent
    ``seconds`` of CPU time, unless the document's budget ends first (then the
    document's ``limit_exceeded``). Outside it, a no-op."""
    deadline = _doc_deadline
    if deadline is None or not _can_time():
        yield
        return
    _arm(min(seconds, deadline - time.process_time()))
    try:
        yield
    except _OutOfCpu:
        if time.process_time() >= deadline - 0.001:
            raise
        raise SignatureOutOfCpu(f"more than {seconds:g} s of CPU time") from None
    finally:
        if _doc_deadline is not None:
            _arm(_doc_deadline - time.process_time())


def init_verify_process(max_memory_bytes: int) -> None:
    """The initializer of a verify worker process: a lower priority (the kiosk's
    processes win the CPU) and a cap on its address space."""
    import resource

    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = max_memory_bytes if hard == resource.RLIM_INFINITY else min(max_memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
