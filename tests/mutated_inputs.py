"""Kernels changed field by field, run in this process: translated, through the default pipeline, verified and
interpreted.  Whatever a changed kernel does, the only exceptions allowed out are Tusk's own errors (a file
that is not a kernel aside): anything else is an internal error -- numpy's ``MemoryError`` for an address past
the machine, a ``ZeroDivisionError`` for a tensor with no elements in a row.

A KLR file is decoded into its objects, one to three of its numbers or strings are replaced (by edge values:
0, -1, 2^31, 2^62, NaN, empty or long strings ...), and the objects are written back, so the change lands
behind the byte-level checks the reader does; a BIR-JSON file is changed the same way as JSON.  Used by
``tests/test_mutated_inputs.py`` (a few seeded cases) and ``bench/fuzz_inputs.py`` (as many as asked).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "examples" / "kernels"

INT_EDGES = (0, 1, -1, 2, 7, 128, 129, 1 << 31, -(1 << 31), 1 << 62)
FLOAT_EDGES = (0.0, -1.0, float("nan"), float("inf"), 1e30)
STR_EDGES = ("", "x", "a" * 300, "../../etc/passwd", "\x00")
JSON_EDGES = (None, -1, 0, 1, 2, 3, 7, 128, 129, 1 << 31, 1 << 62, -(1 << 40), 1.5, "x", "", [], {}, [1, 2],
              [[1, 2], [3, 4]], True, "sb", "psum", "float32", "int8")


def _edge(rng: random.Random, v: Any) -> Any:
    if isinstance(v, int):
        return rng.choice((*INT_EDGES, v + 1, v - 1, v * 2, v * 1000))
    if isinstance(v, float):
        return rng.choice((*FLOAT_EDGES, v * 2))
    return rng.choice((*STR_EDGES, v + "x"))


def _klr_leaves(obj: Any) -> Iterator[tuple[Any, Any, Any]]:
    """(holder, field or index, value) of every number and string in a decoded KLR file."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                yield obj, f.name, v
            else:
                yield from _klr_leaves(v)
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                yield obj, k, v
            else:
                yield from _klr_leaves(v)
    elif isinstance(obj, tuple):
        for v in obj:
            if not isinstance(v, (int, float, str)):
                yield from _klr_leaves(v)


def mutated_klr(rng: random.Random, data: bytes) -> bytes | None:
    """``data`` (a KLR file) with one to three values changed, or None when the change cannot be written."""
    from tusk.ir.klr import read_klr, write_klr

    contents = read_klr(data)
    leaves = list(_klr_leaves(contents))
    for _ in range(rng.randint(1, 3)):
        holder, key, v = rng.choice(leaves)
        if isinstance(holder, list):
            holder[key] = _edge(rng, v)
        else:
            object.__setattr__(holder, key, _edge(rng, v))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a Nat past the C++ reader's 32 bits: the point of the test
            return write_klr(contents)
    except Exception:  # noqa: BLE001 -- a value the writer's types refuse: no file to test
        return None


def _json_paths(obj: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, (*path, k))
    elif isinstance(obj, list):
        for k, v in enumerate(obj[:12]):
            yield from _json_paths(v, (*path, k))


def mutated_bir_json(rng: random.Random, doc: Any) -> str:
    """The BIR-JSON document ``doc`` with one to three values changed, removed or repeated."""
    doc = copy.deepcopy(doc)
    paths = list(_json_paths(doc))[1:]
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        holder = doc
        try:
            for k in path[:-1]:
                holder = holder[k]
            old, r = holder[path[-1]], rng.random()
        except (KeyError, IndexError, TypeError):  # an earlier change moved it
            continue
        if r < 0.7:
            numeric = isinstance(old, int) and not isinstance(old, bool) and rng.random() < 0.6
            holder[path[-1]] = rng.choice((old + 1, old - 1, old * 2, 0, -old, old + 128)) if numeric \
                else rng.choice(JSON_EDGES)
        elif r < 0.85 and isinstance(holder, dict):
            del holder[path[-1]]
        elif isinstance(holder, list):
            holder.insert(path[-1], copy.deepcopy(old))
    return json.dumps(doc)


def run_kernel_file(path: Path, work: Path) -> str:
    """Translate, the default pipeline, the verifier and the interpreter on kernel file ``path``: "ran", or
    "refused" (a TuskError on the way, or not a kernel); anything else raises."""
    from tusk import stages
    from tusk.ir.errors import TuskError
    from tusk.ir.verify import verify
    from tusk.sim.interp import random_inputs, run
    from tusk.stages.host import NotAKernel, host_module_for
    from tusk.workflows.pipeline import default_pipeline, resolve

    try:
        module = host_module_for(str(path), 0, str(work))
        for k, step in enumerate(resolve(default_pipeline()).steps):
            spec = step.task_spec()
            module = stages.resolve_target(spec["target"])(**spec.get("options", {})).run(module)[0]
            if k == 0:
                verify(module)  # as a build does (verify = "ends"): the kernel as translated
        verify(module)
        run(module, random_inputs(module), strict=False)
        return "ran"
    except (TuskError, NotAKernel, RecursionError):
        return "refused"


def fuzz(seed: int, cases: int, work: Path, kinds: tuple[str, ...] = ("klr", "bir")) -> dict[str, Any]:
    """``cases`` changed kernels of each kind: counts by outcome, the internal errors (type, message, where,
    the traceback's last lines) of the first few, and the slowest case (one took minutes in the timing
    model before it bounded a transfer's length)."""
    rng = random.Random(seed)
    klr = {p.name: p.read_bytes() for p in sorted(KERNELS.glob("*.klr"))}
    bir = {p.name: json.loads(p.read_text()) for p in sorted(KERNELS.glob("*.json"))}
    work.mkdir(parents=True, exist_ok=True)
    counts = {"ran": 0, "refused": 0, "unwritable": 0, "internal": 0}
    internal: list[dict[str, str]] = []
    slowest = (0.0, "")
    for kind in kinds:
        for _ in range(cases):
            name = rng.choice(sorted(klr if kind == "klr" else bir))
            path = work / f"k.{'klr' if kind == 'klr' else 'json'}"
            if kind == "klr":
                data = mutated_klr(rng, klr[name])
                if data is None:
                    counts["unwritable"] += 1
                    continue
                path.write_bytes(data)
            else:
                path.write_text(mutated_bir_json(rng, bir[name]))
            t0 = time.perf_counter()
            try:
                counts[run_kernel_file(path, work)] += 1
            except Exception as e:  # noqa: BLE001 -- what the test is looking for
                counts["internal"] += 1
                if len(internal) < 10:
                    internal.append({"kernel": name, "error": f"{type(e).__name__}: {e}"[:300],
                                     "where": "".join(traceback.format_exception(e)[-3:])[-800:]})
            slowest = max(slowest, (time.perf_counter() - t0, name))
    return {"counts": counts, "internal": internal, "slowest": {"seconds": round(slowest[0], 2), "kernel": slowest[1]}}
