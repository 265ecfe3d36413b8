"""One build at a time writes an output directory: ``OUT/.tusk-lock``, held with ``flock``.

Two builds into one OUT would each move their kernels' directories into place (whole, by renames:
``tusk.workflows.outputs``), and whichever finished last would decide what OUT holds, beside a report
of the other build.  So a build holds an exclusive ``flock`` on ``OUT/.tusk-lock`` from before it
changes anything in OUT (the no-op index it forgets) until its last file is written (the index of a
build that succeeded), and a second build into that OUT stops at once with a usage error (exit 2)
naming the holder's process; it has written nothing.  The cache takes no lock: its writes are
atomic renames of content-addressed files (``tusk.cache.store``), shared by every build.

* The kernel releases an ``flock`` when its holder dies, so a build killed with SIGKILL blocks
  nothing: the next one locks the file it left and removes it when done.  A process forked while
  the lock is held (a local worker) closes its copy of the descriptor at once: that copy would keep
  the lock after the build's death until the worker noticed.
* The file exists only while a build runs: it is removed, still locked, when the build ends.  A
  build that has locked it checks that the path still names the file it locked (the holder before
  it may have removed it meanwhile) and tries again otherwise.  The holder writes its process id,
  host and start time into it, for the refusal's message.
* Within one process the lock is re-entrant (the CLI holds it around ``compile_directory``, which
  takes it too): it orders processes, not threads.
* A symbolic link in the lock file's place is refused, never followed (the build would truncate and write
  the file it names).  A refused build removes OUT, and the parents it made for OUT, when they are empty.
* Without ``fcntl`` (Windows), or on a file system that refuses ``flock``, builds are not locked.
* Only builds take it: ``tusk trace -o FILE`` writes one file atomically, the other commands read.

Standard library only (and ``tusk.ir.errors``): the ``tusk`` entry point's shortcuts use it before
anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locking
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".tusk-lock"
HOLDER_WAIT = 0.5  # seconds a refused build waits for the holder to write who it is (it locks, then writes)


@dataclass
class _Held:
    fd: int | None        # None: not locked (no fcntl, a file system without flock, OUT not a directory)
    path: str
    count: int = 1
    drop: bool = False    # remove OUT at release if it is empty then (a refused build made it)
    made: list[str] = field(default_factory=list)  # OUT's parents this build made, innermost first


def _missing_dirs(out: Path | str) -> list[str]:
    """The parents of ``out`` that do not exist yet, innermost first (``makedirs`` is about to make them)."""
    missing = []
    parent = os.path.dirname(os.path.abspath(out))
    while parent and not os.path.exists(parent):
        missing.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    return missing


_HELD: dict[str, _Held] = {}  # real path of OUT -> what this process holds


def acquire(out: Path | str, shown: str | None = None) -> str:
    """Hold OUT's lock (OUT made when missing); returns the key to :func:`release`.  ``shown``: OUT as the
    user wrote it.  UsageError: another process holds it, or OUT cannot be written."""
    from tusk.ir.errors import UsageError

    shown = str(out) if shown is None else shown
    if os.path.lexists(out) and not os.path.isdir(out):
        key = os.path.realpath(out)  # not a directory: the build refuses it with its own message
        _HELD.setdefault(key, _Held(None, "", 0)).count += 1
        return key
    try:
        made = _missing_dirs(out)
        os.makedirs(out, exist_ok=True)
        key = os.path.realpath(out)
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
            return key
        path = os.path.join(key, LOCK_FILE)
        _HELD[key] = _Held(_lock(path, shown), path, made=made)
    except OSError as e:
        raise UsageError(f"cannot write the output directory {shown}: {e.strerror or e}") from None
    return key


def _lock(path: str, shown: str) -> int | None:
    """The descriptor of ``path``, locked and naming this process; None where flock is not available."""
    from tusk.ir.errors import UsageError

    if fcntl is None:
        return None
    while True:
        try:  # not inherited by a program a build starts; never through a symbolic link put in OUT's place
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise UsageError(f"{shown}: {LOCK_FILE} is a symbolic link; remove it (Tusk writes its lock there)") \
                from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise UsageError(f"{shown} is being written by another Tusk build ({_holder(path)}): wait for it "
                                 "to finish, or choose another -o") from None
            return None  # the file system does not lock (ENOLCK, EOPNOTSUPP): unlocked, as before
        try:
            st, here = os.fstat(fd), os.stat(path)
            same = (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            with contextlib.suppress(OSError):  # no holder record (a full disk): the message says "pid unknown"
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                          "started": time.time()}).encode(), 0)
            return fd
        os.close(fd)  # the holder removed the file after we opened it: lock the one there now


def _holder(path: str) -> str:
    """Who holds the lock at ``path``, as its file says (it writes that just after locking)."""
    deadline = time.monotonic() + HOLDER_WAIT
    while True:
        try:
            with open(path, encoding="utf-8") as fh:
                rec = json.loads(fh.read())
            pid = int(rec["pid"])
            break
        except (OSError, ValueError, TypeError, KeyError):
            if time.monotonic() > deadline:
                return "pid unknown"
            time.sleep(0.02)
    host = rec.get("host")
    where = f" on {host}" if isinstance(host, str) and host != socket.gethostname() else ""
    started = rec.get("started")
    since = f", started {max(0.0, time.time() - started):.0f} s ago" if isinstance(started, (int, float)) else ""
    return f"pid {pid}{where}{since}"


def release(key: str) -> None:
    """Undo one :func:`acquire`; the last one removes the lock file (still locked) and unlocks."""
    held = _HELD.get(key)
    if held is None:
        return
    held.count -= 1
    if held.count > 0:
        return
    del _HELD[key]
    if held.fd is not None:
        with contextlib.suppress(OSError):
            os.unlink(held.path)  # a build that opened it meanwhile finds it gone once it locks, and retries
        os.close(held.fd)
    if held.drop:
        for d in [key, *held.made]:  # OUT, then the parents it needed: a refused request leaves none behind
            try:
                os.rmdir(d)  # only if empty
            except OSError:
                break


@contextlib.contextmanager
def held(out: Path | str, shown: str | None = None) -> Iterator[None]:
    """:func:`acquire` for the block."""
    key = acquire(out, shown)
    try:
        yield
    finally:
        release(key)


def drop_if_empty(out: Path | str) -> None:
    """Remove OUT if it is empty, once this process releases it (now when it does not hold it): a refused
    or empty build leaves no output directory it made."""
    held = _HELD.get(os.path.realpath(out))
    if held is not None:
        held.drop = True
        return
    with contextlib.suppress(OSError):
        os.rmdir(out)


def release_all() -> None:
    """Release every output directory this process holds (it is about to end without unwinding)."""
    for key in list(_HELD):
        _HELD[key].count = 1
        release(key)


def _forget_in_child() -> None:
    """A forked process holds no output directory: it closes its copies of the locked descriptors (which
    would keep the lock after the build's death) without unlocking them for the build (no LOCK_UN)."""
    for held in _HELD.values():
        if held.fd is not None:
            with contextlib.suppress(OSError):
                os.close(held.fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
