"""The few filesystem operations the store needs, for a local path or an fsspec URL.

A local directory (a plain path or a ``file://`` URL) is the main case and
uses ``os`` directly: files are written aside and moved with ``os.replace``,
object directories are published with one ``os.rename``.  Any other URL
(``memory://``, ``s3://`` ...) goes through fsspec; there a directory cannot
be renamed atomically, so objects are written in place and committed by a
completion marker written last (see :mod:`cache.objects`).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterator


def _unique() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


class LocalFS:
    """A store root on the local filesystem."""

    atomic_dirs = True  # a directory can be published with one rename

    def __init__(self, root: str | os.PathLike):
        self.root = os.path.abspath(os.fspath(root))
        self.url = self.root

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    # ------------------------------------------------------------ queries
    def exists(self, p: str) -> bool:
        return os.path.exists(p)

    def isdir(self, p: str) -> bool:
        return os.path.isdir(p)

    def listdir(self, p: str) -> list[str]:
        try:
            return sorted(os.listdir(p))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, p: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        try:
            with open(p, "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def mtime(self, p: str) -> float:
        try:
            return os.stat(p).st_mtime
        except FileNotFoundError:
            return 0.0

    def tree_size(self, p: str) -> int:
        """Bytes of the files under ``p`` (directory entries themselves not counted)."""
        total = 0
        for dirpath, _dirs, files in os.walk(p):
            for f in files:
                try:
                    total += os.stat(os.path.join(dirpath, f)).st_size
                except FileNotFoundError:
                    pass
        return total

    def usage(self, p: str) -> int:
        """Bytes the disk gives ``p`` (a file, or a directory with everything under it), as ``du`` counts
        them: many small files take far more than their sizes."""
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            return 0
        total = st.st_blocks * 512
        if os.path.isdir(p):
            for dirpath, dirs, files in os.walk(p):
                for f in dirs + files:
                    try:
                        total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
                    except FileNotFoundError:
                        pass
        return total

    def prune_empty_dirs(self, tops: list[str]) -> None:
        """Remove the empty directories under each of ``tops`` (an emptied prefix directory still costs a
        block); a directory a writer fills meanwhile is simply not empty."""
        for top in tops:
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                if dirpath != top:
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        pass

    def walk_files(self, p: str) -> Iterator[tuple[str, int, float]]:
        """(path, size, mtime) of every file under ``p``."""
        for dirpath, _dirs, files in os.walk(p):
            for f in files:
                full = os.path.join(dirpath, f)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                yield full, st.st_size, st.st_mtime

    # ------------------------------------------------------------ updates
    def makedirs(self, p: str) -> None:
        os.makedirs(p, exist_ok=True)

    def write_atomic(self, p: str, data: bytes) -> None:
        """Write aside in the same directory, then ``os.replace``: readers see old or new, never half."""
        d = os.path.dirname(p)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{os.path.basename(p)}.tmp-{_unique()}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, p)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def touch(self, p: str) -> None:
        """Mark ``p`` as used now (its mtime is the LRU clock of the store, ``cache.gc``)."""
        try:
            os.utime(p, None)
        except OSError:
            pass

    def temp_dir(self) -> str:
        """A fresh private directory under ``<root>/tmp`` to write an object aside."""
        p = self.path("tmp", _unique())
        os.makedirs(p)
        return p

    def publish_dir(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` in one rename; False (and ``src`` left) when ``dst`` exists."""
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            os.rename(src, dst)
            return True
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY) or os.path.exists(dst):
                return False
            raise

    def remove_tree(self, p: str) -> None:
        """Remove a directory: first renamed into ``trash/`` so no reader sees it half-deleted."""
        if not os.path.exists(p):
            return
        trash = self.path("trash", _unique())
        try:
            os.makedirs(os.path.dirname(trash), exist_ok=True)
            os.rename(p, trash)
        except OSError:
            trash = p
        shutil.rmtree(trash, ignore_errors=True)

    def remove_file(self, p: str) -> None:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass

    def writer(self, root: str):
        """``put(relative path, bytes)`` under ``root`` (a fresh directory nobody else reads yet)."""
        made: set[str] = set()

        def put(rel: str, data: bytes) -> None:
            p = os.path.join(root, rel)
            d = os.path.dirname(p)
            if d not in made:
                os.makedirs(d, exist_ok=True)
                made.add(d)
            with open(p, "wb") as fh:
                fh.write(data)

        return put

    def reader(self, root: str):
        """``get(relative path) -> bytes | None`` under ``root``."""
        return lambda rel: self.read_bytes(os.path.join(root, rel))


class FsspecFS:
    """A store root behind an fsspec URL (``memory://``, ``s3://``, ...)."""

    atomic_dirs = False  # objects are written in place and committed by their marker

    def __init__(self, url: str, storage_options: dict | None = None):
        from tusk.ir.errors import UsageError

        protocol = url.split("://", 1)[0]
        try:
            import fsspec

            self.fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        except ImportError as e:  # fsspec itself, or the protocol's package (s3fs, gcsfs, ...)
            raise UsageError(f"cache {url}: the {protocol}:// file system is not installed ({e})") from None
        except ValueError as e:  # fsspec: "Protocol not known"
            raise UsageError(f"cache {url}: {e} (a directory, or an fsspec URL such as memory://tusk)") from None
        self.root = root.rstrip("/")
        self.url = url

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def exists(self, p: str) -> bool:
        return self.fs.exists(p)

    def isdir(self, p: str) -> bool:
        return self.fs.isdir(p)

    def listdir(self, p: str) -> list[str]:
        try:
            return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(p, detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_bytes(self, p: str) -> bytes | None:
        try:
            return self.fs.cat_file(p)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def _info_time(self, info: dict) -> float:
        for k in ("mtime", "LastModified", "last_modified", "created"):
            v = info.get(k)
            if v is None:
                continue
            if hasattr(v, "timestamp"):
                return float(v.timestamp())
            try:
                return float(v)
            except (TypeError, ValueError):
                continue
        return 0.0

    def mtime(self, p: str) -> float:
        try:
            return self._info_time(self.fs.info(p))
        except FileNotFoundError:
            return 0.0

    def tree_size(self, p: str) -> int:
        return sum(size for _p, size, _t in self.walk_files(p))

    def usage(self, p: str) -> int:
        """Bytes stored under ``p`` (an object store bills what it holds, not blocks)."""
        if self.fs.isfile(p):
            return int(self.fs.size(p) or 0)
        return self.tree_size(p)

    def prune_empty_dirs(self, tops: list[str]) -> None:
        pass  # object stores have no directories of their own

    def walk_files(self, p: str) -> Iterator[tuple[str, int, float]]:
        try:
            found = self.fs.find(p, detail=True)
        except FileNotFoundError:
            return
        for path, info in found.items():
            yield path, int(info.get("size") or 0), self._info_time(info)

    def makedirs(self, p: str) -> None:
        self.fs.makedirs(p, exist_ok=True)

    def write_atomic(self, p: str, data: bytes) -> None:
        # Object stores replace a key in one PUT; other fsspec backends do their best.
        self.fs.pipe_file(p, data)

    def touch(self, p: str) -> None:
        pass  # remote stores keep no cheap access clock; gc falls back to the record's time

    def temp_dir(self) -> str:
        raise NotImplementedError("fsspec stores write objects in place")

    def publish_dir(self, src: str, dst: str) -> bool:
        if self.fs.exists(dst):
            return False
        self.fs.mv(src, dst, recursive=True)
        return True

    def remove_tree(self, p: str) -> None:
        try:
            self.fs.rm(p, recursive=True)
        except FileNotFoundError:
            pass

    def remove_file(self, p: str) -> None:
        try:
            self.fs.rm_file(p)
        except FileNotFoundError:
            pass

    def writer(self, root: str):
        return lambda rel, data: self.fs.pipe_file(f"{root}/{rel}", data)

    def reader(self, root: str):
        return lambda rel: self.read_bytes(f"{root}/{rel}")


def open_fs(location: str | os.PathLike) -> LocalFS | FsspecFS:
    """A filesystem for a store root: a path, a ``file://`` URL, or any fsspec URL."""
    text = os.fspath(location)
    if "://" not in text:
        return LocalFS(Path(text).expanduser())
    if text.startswith("file://"):
        return LocalFS(text[len("file://"):])
    return FsspecFS(text)


def now() -> float:
    return time.time()
