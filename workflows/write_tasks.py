"""The tasks that write a build's BIR-JSON files from objects in the store.

``write_outputs`` renders whole modules (a worker serialises big modules in
parallel with other work; the client checks the files arrived).  A big final
module is written in parts instead: :func:`write_part` renders part ``k`` of
``n`` (``bir_json.write_part``: parts joined in order are byte for byte the
whole write), :func:`place_part` copies a later part to its offset once the
sizes before it are known, and the client puts the file in place with
:func:`finish_parts`.  Each file written is noted in the store
(:func:`note_written`) so that the same object wanted again -- the same
kernels into another ``-o`` -- is copied from that file without decoding the
module (:func:`_reuse`).

Like every task (:mod:`tusk.workflows.tasks`), these take JSON-able
arguments, return a small dict and never raise for a failure of their own.
"""

from __future__ import annotations

import os
import time

from tusk.workflows.task_usage import measured
from tusk.workflows.tasks import _error, _load_input, _store, _where, _worker_address


@measured
def write_outputs(store_url: str, items: list) -> dict:
    """Write objects as BIR-JSON files: ``items`` is a list of ``[hash, path, artifact directory]`` (the
    module is written with that artifact directory: objects hold none), ``"flatten"`` appended for the
    per-core form (``bir_json.save(..., flatten=True)``).

    Also reports the const files the modules name (the client stages them
    next to the outputs).

    Run on a worker so that serialising big modules happens in parallel;
    the client checks the files arrived (a worker on another machine may
    not share the output directory) and writes them itself otherwise.

    **Reuse.**  Each file written is noted in the store (``bir-json-file``:
    object hash, form and writer code -> where it was written, its size,
    mtime and const files).  The same object wanted again -- the same
    kernels into another ``-o`` -- is copied from that file with only its
    ``artifact_path`` changed, without loading or decoding the module, as
    long as the file still has its recorded size and mtime.
    """
    from tusk.ir import bir_json

    clock: dict = {"started": time.time()}
    try:
        store = _store(store_url)
        written, consts = [], set()
        for h, path, *rest in items:
            flatten = "flatten" in rest[1:]
            art = rest[0] if rest else None
            reused = _reuse(store, h, flatten, path, art)
            if reused is None:
                module, missing = _load_input(store, h)
                if missing:
                    return missing
                if rest:  # a new Module object: the stored one may be shared with the next task
                    module = module.replaced(artifact_dir=rest[0])
                bir_json.save(module, path, flatten=flatten)
                names = sorted({fn.strings[c] for fn in module.functions
                                for c in set(fn.memlocs["const_path"].tolist()) if c >= 0})
                note_written(store, h, flatten, path, module.artifact_dir, names)
                reused = names
            written.append([path, os.path.getsize(path), _where()])
            consts.update(reused)
        clock["run"] = round(time.time() - clock["started"], 6)
        return {"status": "written", "files": written, "consts": sorted(consts), "timing": clock,
                "worker_address": _worker_address(), "ended": time.time()}
    except Exception as e:  # noqa: BLE001
        return _error({"name": "write_bir_json"}, e)


WRITTEN_NOTE = "bir-json-file"
HEAD_BYTES = 1 << 16  # the module's head (arch, artifact_path, ...) comes first: sorted keys


def _written_key(h: str, flatten: bool) -> str:
    from tusk.cache.keys import digest, package_digest

    return digest({"object": h, "flatten": flatten, "writer": package_digest()})


def _placed(path: str, art: str) -> str:
    """Where ``path``, written into a kernel's staging directory, lies once that directory is moved into place
    as the artifact directory ``art`` (``tusk.workflows.outputs``)."""
    parts = os.path.abspath(path).split(os.sep)
    k = next((i for i, p in enumerate(parts) if p.startswith(".tusk-staging-")), None)
    return os.path.join(art, *parts[k + 1:]) if k is not None and art else os.path.abspath(path)


def note_written(store, h: str, flatten: bool, path: str, art: str, consts: list[str]) -> None:
    try:
        st = os.stat(path)  # a rename into place keeps size and mtime
        store.put_note(WRITTEN_NOTE, _written_key(h, flatten), {"path": _placed(path, art), "size": st.st_size,
                                                                "mtime_ns": st.st_mtime_ns, "artifact": art or "",
                                                                "consts": consts})
    except OSError:
        pass  # no reuse next time; the file itself is written


def written_before(store, h: str, flatten: bool) -> bool:
    """An earlier write of object ``h`` is noted (the next write copies it instead of rendering it)."""
    return isinstance(store.get_note(WRITTEN_NOTE, _written_key(h, flatten)), dict)


def bir_json_parts():
    """The BIR-JSON module, whose ``render_part`` (where this Tusk has it) renders one part of a document."""
    from tusk.ir import bir_json

    return bir_json


def parts_file(path: str, n: int) -> str:
    """The temporary file the ``n`` parts of ``path`` are written into, each at its offset; renamed to ``path``
    once the last one is in (:func:`finish_parts`)."""
    return f"{path}.parts{n}"


def part_file(path: str, n: int, k: int) -> str:
    """Where part ``k`` (``k`` > 0) of ``path``'s ``n`` parts waits for its offset: beside ``path``, in the
    kernel's staging directory, so whatever an interrupted build leaves goes with that directory."""
    return f"{path}.parts{n}.{k}"


def _part_module(store, h: str, art: str, clock: dict):
    module, missing = _load_input(store, h, clock)
    return (None, missing) if missing else (module.replaced(artifact_dir=art), None)


def _render_part(store_url: str, h: str, art: str, k: int, n: int, dest: str, clock: dict,
                 timed: str) -> tuple[dict | None, list[str]]:
    """Stream part ``k`` of object ``h``'s BIR-JSON into the new file ``dest`` past the page cache, its seconds
    as ``clock[timed]``; (None, the const files the module names when ``k`` is 0), or (the task's answer when
    the object is gone, [])."""
    from tusk.ir.direct_write import DirectWriter

    module, missing = _part_module(_store(store_url), h, art, clock)
    if missing:
        return missing, []
    t0 = time.perf_counter()
    with open(dest, "wb") as fh:
        with DirectWriter(fh) as out:
            bir_json_parts().write_part(module, k, n, out)
    clock[timed] = round(time.perf_counter() - t0, 6)
    consts = sorted({fn.strings[c] for fn in module.functions
                     for c in set(fn.memlocs["const_path"].tolist()) if c >= 0}) if k == 0 else []
    return None, consts


@measured
def write_part(store_url: str, h: str, path: str, art: str, k: int, n: int) -> dict:
    """Render part ``k`` of ``n`` of object ``h``'s BIR-JSON (artifact directory ``art``; parts joined in order
    are byte for byte the whole write, ``bir_json.write_part``).

    Part 0 starts at offset 0: it streams straight into :func:`parts_file` (created here).  A later part's
    offset is the size of the parts before it, known once every part is rendered: it streams into a file of
    its own (:func:`part_file`), which :func:`place_part` copies to its offset.  Both go past the page cache:
    keeping a part's bytes in the worker's memory instead cost a fresh page for every 4 KiB of it (on this
    VM 1.7x the render of part 0), and a later read of the part file costs the device's time, not the CPU's.
    Part 0 also reports the const files the module names."""
    clock: dict = {"started": time.time()}
    try:
        dest = parts_file(path, n) if k == 0 else part_file(path, n, k)
        missing, consts = _render_part(store_url, h, art, k, n, dest, clock, "run")
        if missing:
            return missing
        return {"status": "part-rendered", "size": os.path.getsize(dest), "consts": consts, "timing": clock,
                "worker_address": _worker_address(), "ended": time.time()}
    except Exception as e:  # noqa: BLE001
        return _error({"name": "write_bir_json"}, e)


@measured
def place_part(store_url: str, h: str, path: str, art: str, k: int, n: int, offset: int) -> dict:
    """Copy part ``k`` (``k`` > 0) of ``n`` into :func:`parts_file` at ``offset`` from its own file (rendered
    again first if that file is gone), then remove that file."""
    clock: dict = {"started": time.time()}
    try:
        from tusk.ir.direct_write import read_direct, write_at

        src = part_file(path, n, k)
        if not os.path.exists(src):
            missing, _ = _render_part(store_url, h, art, k, n, src, clock, "rendered_again")
            if missing:
                return missing
        t0 = time.perf_counter()
        fd = os.open(parts_file(path, n), os.O_WRONLY)
        try:
            size = write_at(fd, offset, read_direct(src))
        finally:
            os.close(fd)
        os.unlink(src)
        clock["run"] = round(time.perf_counter() - t0, 6)
        return {"status": "part-placed", "size": size, "timing": clock, "worker_address": _worker_address(),
                "ended": time.time()}
    except Exception as e:  # noqa: BLE001
        return _error({"name": "write_bir_json"}, e)


def drop_parts(path: str, n: int) -> None:
    """Remove the temporary files of ``path``'s ``n`` parts (a part failed, or they are placed)."""
    for f in [parts_file(path, n), *(part_file(path, n, k) for k in range(1, n))]:
        try:
            os.unlink(f)
        except OSError:
            pass


def finish_parts(path: str, n: int, size: int) -> int:
    """Put the file of ``path``'s ``n`` placed parts in place, once it has the ``size`` their sizes add up to
    (else OSError, and ``path`` is left as it was); its temporary file is removed either way."""
    tmp = parts_file(path, n)
    try:
        got = os.path.getsize(tmp)
        if got != size:
            raise OSError(f"{tmp} has {got} bytes, its parts {size}")
        os.replace(tmp, path)
    finally:
        drop_parts(path, n)  # after the rename, nothing is left to remove
    return size


def _reuse(store, h: str, flatten: bool, path: str, art: str | None) -> list[str] | None:
    """Copy an earlier write of the same object into ``path`` (its const files), or None if there is none
    that can be trusted: the file changed, or its head does not name its artifact directory exactly once."""
    import orjson

    note = store.get_note(WRITTEN_NOTE, _written_key(h, flatten))
    if not isinstance(note, dict) or _placed(path, art or "") == note.get("path"):
        return None
    src = note.get("path")
    if not isinstance(src, str):
        return None
    try:
        st = os.stat(src)
        if st.st_size != note.get("size") or st.st_mtime_ns != note.get("mtime_ns"):
            return None
        old = b'"artifact_path":' + orjson.dumps(note.get("artifact") or "")
        new = b'"artifact_path":' + orjson.dumps(art if art is not None else note.get("artifact") or "")
        tmp = f"{path}.tmp{os.getpid()}"
        with open(src, "rb") as fin:
            head = fin.read(HEAD_BYTES)
            first = head.split(b"\n", 1)[0] if b"\n" in head else None
            if first is None or first.count(old) != 1 or first.count(b'"artifact_path":') != 1:
                return None
            try:
                with open(tmp, "wb") as fout:
                    fout.write(head.replace(old, new, 1))
                    import shutil

                    shutil.copyfileobj(fin, fout, 1 << 22)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except OSError:
        return None
    return list(note.get("consts") or [])
