"""A large output written past the page cache (``O_DIRECT``), a chunk at a time, while the next is rendered.

On this machine ``write()`` of a large output cost a third to a half of what the writer spends making
its bytes: the kernel copies every byte into page cache it must take from fresh memory, and this VM
hands free memory back to its host, so fresh memory costs ~1 ms of system time per MB (a 444 MB ``dd``
to a new file: 0.44-0.81 s system; with ``oflag=direct``: 0.09-0.11 s).  :class:`DirectWriter` copies
the bytes into a few reused, page-aligned buffers and writes each full one with ``O_DIRECT`` on a helper
thread (the device's time overlaps the rendering of the next chunk; ``os.write`` releases the GIL).
Whatever is left below one chunk -- the whole of a small file -- is written through the page cache at
the end, so small outputs behave as before.  A file system that refuses ``O_DIRECT`` gets ordinary
writes.

Meant for the atomic writer's private temporary file: nobody reads it while it is written, and a later
reader of the output reads it from the device rather than from the cache.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from queue import SimpleQueue
from types import TracebackType
from typing import BinaryIO, Iterable, Iterator

CHUNK = 4 << 20  # bytes per direct write: a multiple of every logical block size and page size in use
BUFFERS = 3  # one being filled, up to two on their way to the device
try:
    import fcntl
except ImportError:  # Windows: no O_DIRECT either
    fcntl = None  # type: ignore[assignment]
O_DIRECT = getattr(os, "O_DIRECT", 0) if fcntl is not None else 0  # 0: ordinary writes only


class DirectWriter:
    """A binary, write-only file object over ``fh`` (an open file at offset 0, nothing written yet).

    Use it as a context manager: leaving it normally writes the rest and waits for every chunk; leaving
    it on an exception waits for the chunks in flight and writes nothing more.  A write error of a chunk
    (a full disk) is raised by the next :meth:`write` or by the exit."""

    def __init__(self, fh: BinaryIO):
        fh.flush()
        self.fd = fh.fileno()
        self.direct = bool(O_DIRECT)  # chunks go direct, until the file system refuses it
        self.on = False  # whether the descriptor has O_DIRECT now
        self.buf = _buffer()
        self.view = memoryview(self.buf)
        self.used = 0
        self.spare: SimpleQueue[mmap.mmap] = SimpleQueue()  # buffers back from the device
        self.made = 1
        self.todo: SimpleQueue[tuple[mmap.mmap, int] | None] = SimpleQueue()
        self.worker: threading.Thread | None = None
        self.error: BaseException | None = None

    def __enter__(self) -> DirectWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._stop()
            if kind is None:
                self._raise()
                self._set_direct(False)
                _write_all(self.fd, self.view[:self.used])
        finally:
            self.view.release()  # the buffers are unmapped with their last reference

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        src = memoryview(data).cast("B")
        n, at = len(src), 0
        while at < n:
            k = min(CHUNK - self.used, n - at)
            self.view[self.used:self.used + k] = src[at:at + k]
            self.used += k
            at += k
            if self.used == CHUNK:
                self._submit()
        return n

    def flush(self) -> None:
        """Nothing to do: bytes below a chunk stay in the buffer until the end."""

    # ------------------------------------------------------------------ the helper thread

    def _submit(self) -> None:
        self._raise()
        if self.worker is None:
            self.worker = threading.Thread(target=self._run, name="tusk-direct-write", daemon=True)
            self.worker.start()
        self.todo.put((self.buf, CHUNK))
        self.view.release()
        if self.made < BUFFERS and self.spare.empty():
            self.buf, self.made = _buffer(), self.made + 1
        else:
            self.buf = self.spare.get()  # waits for the device when every buffer is in flight
        self.view = memoryview(self.buf)
        self.used = 0
        self._raise()

    def _run(self) -> None:
        while (item := self.todo.get()) is not None:
            buf, n = item
            if self.error is None:
                try:
                    self._write_chunk(buf, n)
                except BaseException as e:  # handed to the writing thread
                    self.error = e
            self.spare.put(buf)

    def _write_chunk(self, buf: mmap.mmap, n: int) -> None:
        with memoryview(buf) as view:
            at = 0
            while at < n:
                self._set_direct(self.direct)
                try:
                    at += _write(self.fd, view[at:n])
                except OSError as e:
                    if e.errno != errno.EINVAL or not self.on:
                        raise
                    self.direct = False  # refused (alignment): the rest of the file goes through the page cache

    def _set_direct(self, on: bool) -> None:
        """Turn O_DIRECT on or off for the descriptor (off for good if the file system refuses it)."""
        if on == self.on:
            return
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, flags | O_DIRECT if on else flags & ~O_DIRECT)
        except OSError as e:
            if not on or e.errno != errno.EINVAL:
                raise
            self.direct = False  # this file system does not do it
            return
        self.on = on

    def _stop(self) -> None:
        if self.worker is not None:
            self.todo.put(None)
            self.worker.join()
            self.worker = None

    def _raise(self) -> None:
        if self.error is not None:  # stays: the helper writes nothing more after it
            raise self.error


def _buffer() -> mmap.mmap:
    return mmap.mmap(-1, CHUNK, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _write(fd: int, view: memoryview) -> int:
    return os.write(fd, view)


def _write_all(fd: int, view: memoryview) -> None:
    at = 0
    while at < len(view):
        at += _write(fd, view[at:])


ALIGN = 4096  # the file offsets O_DIRECT writes start at: a multiple of every logical block size in use


def write_at(fd: int, offset: int, pieces: Iterable[bytes | bytearray | memoryview]) -> int:
    """Write ``pieces``, one after another, into the open file ``fd`` from ``offset`` (the descriptor's position
    is moved); the number of bytes written.

    The bytes before the first 4 KiB boundary go through the page cache, whole chunks after it with
    ``O_DIRECT`` (:class:`DirectWriter`), the last partial chunk through the page cache again: several
    processes can each write a disjoint range of one file this way at the same time (a page that two
    ranges share is only ever written through the cache)."""
    head = -offset % ALIGN
    at = offset
    with contextlib.ExitStack() as stack:
        out = None
        for piece in pieces:
            view = memoryview(piece).cast("B")
            while head and len(view):
                k = os.pwrite(fd, view[:head], at)
                at, head, view = at + k, head - k, view[k:]
            if not len(view):
                continue
            if out is None:
                os.lseek(fd, at, os.SEEK_SET)
                out = stack.enter_context(DirectWriter(stack.enter_context(open(fd, "wb", buffering=0,
                                                                                  closefd=False))))
            out.write(view)
            at += len(view)
    return at - offset


def read_direct(path: str) -> Iterator[memoryview]:
    """The bytes of ``path`` a chunk at a time, read past the page cache (``O_DIRECT``) where the file system
    allows it: a file written by :class:`DirectWriter` is not in the cache, and reading it through the cache
    would cost a fresh page for every 4 KiB.  Each chunk is a view of one reused buffer, valid until the next
    is asked for (:func:`write_at` copies it before that)."""
    fd = _open_direct(path)
    buf = _buffer()  # unmapped with its last view, by whoever holds that
    view = memoryview(buf)
    try:
        while (n := os.readv(fd, [buf])) > 0:
            yield view[:n]
            if n < CHUNK:  # the end: a direct read from an offset off the block grid would be refused
                break
    finally:
        os.close(fd)


class DirectReader:
    """A binary, read-only file object over ``path`` that reads past the page cache (``O_DIRECT``), a chunk at
    a time on a helper thread, while the caller works on the chunk before (``readinto`` copies out of it).

    Reading a large file that is not in the page cache makes the kernel take a fresh page for every 4 KiB of
    it, and this VM charges for fresh memory: ``cat`` of large_matmul's 725 MB output just written cost
    1.03 s of system time, 0.06 s once the file was cached.  The columnar loader reads a file once, start
    to end, so nothing is lost by keeping it out of the cache.  Where the file system refuses ``O_DIRECT``
    (the open or the first read), the file is read as usual; a short read before the end (never seen on a
    regular file) reads the rest as usual too."""

    def __init__(self, path: str):
        self.path = path
        self.size = os.path.getsize(path)
        self.fd = _open_direct(path)
        self.todo: SimpleQueue[tuple[mmap.mmap, int] | BaseException | None] = SimpleQueue()
        self.spare: SimpleQueue[mmap.mmap | None] = SimpleQueue()
        for _ in range(BUFFERS):
            self.spare.put(_buffer())
        self.buf: mmap.mmap | None = None
        self.view: memoryview | None = None
        self.at = self.n = 0
        self.ended = False
        self.worker = threading.Thread(target=self._run, name="tusk-direct-read", daemon=True)
        self.worker.start()

    def __enter__(self) -> DirectReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def readable(self) -> bool:
        return True

    def readinto(self, dest: memoryview | bytearray) -> int:
        """Copy up to ``len(dest)`` of the next bytes into ``dest``; 0 at the end."""
        out = memoryview(dest).cast("B")
        done = 0
        while done < len(out):
            if self.at == self.n and (self.ended or not self._next()):
                break
            assert self.view is not None
            k = min(len(out) - done, self.n - self.at)
            out[done:done + k] = self.view[self.at:self.at + k]
            self.at += k
            done += k
        return done

    def close(self) -> None:
        if not self.ended:
            self.spare.put(None)  # the helper stops at its next chunk, and its last word is None
            while (item := self.todo.get()) is not None:
                if isinstance(item, tuple):
                    self.spare.put(item[0])
            self.ended = True
        self.worker.join()
        if self.view is not None:
            self.view.release()
            self.view = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _next(self) -> bool:
        """Hand the current chunk back and take the next (False at the end)."""
        if self.view is not None:
            self.view.release()
            self.view = None
            self.spare.put(self.buf)
        item = self.todo.get()
        if item is None:
            self.ended, self.at, self.n = True, 0, 0
            return False
        if isinstance(item, BaseException):
            self.ended = True
            raise item
        self.buf, self.n = item
        self.view, self.at = memoryview(self.buf), 0
        return True

    def _run(self) -> None:
        offset, direct = 0, True
        try:
            while offset < self.size:
                buf = self.spare.get()
                if buf is None:  # closed
                    return
                n, direct = self._read_at(buf, offset, direct)
                if n <= 0:  # the file shrank under us: its end is here
                    self.spare.put(buf)
                    break
                offset += n
                self.todo.put((buf, n))
        except BaseException as e:  # handed to the reading thread
            self.todo.put(e)
        finally:
            self.todo.put(None)  # always the last word: the end, or after an error or a close


    def _read_at(self, buf: mmap.mmap, offset: int, direct: bool) -> tuple[int, bool]:
        """One chunk from ``offset`` (bytes read, and whether the next is read directly): directly while the file
        system allows it; once it refuses or reads short, this chunk and the rest as usual."""
        if direct:
            try:
                n = os.preadv(self.fd, [buf], offset)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                n = 0
            if n >= min(CHUNK, self.size - offset):
                return n, True
            os.close(self.fd)
            self.fd = os.open(self.path, os.O_RDONLY)
            if n > 0:
                return n, False
        return os.preadv(self.fd, [buf], offset), False


def _open_direct(path: str) -> int:
    if O_DIRECT:
        try:
            return os.open(path, os.O_RDONLY | O_DIRECT)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
    return os.open(path, os.O_RDONLY)
