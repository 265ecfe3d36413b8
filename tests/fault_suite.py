"""The fault suite: hostile inputs and a faulty environment against whole `tusk compile` commands.

``python bench/faults.py`` runs all of it and prints the counts;
``tests/test_faults.py`` runs a small sample in CI.  Every case is a real
command in its own process group with a timeout (a hang is killed, reported
and the suite goes on).

Hostile inputs get one verdict each (:data:`VERDICTS`): they are built in
small groups and each file's verdict is read from the build's per-kernel
results; a group whose outcome cannot be split per file (a hang, a
traceback, an unexpected exit) is rebuilt file by file, each alone in its
directory with its own timeout, so a hang names its file.

Stray writes are watched over the whole file system when strace is on the
machine: every build runs under ``strace -f`` and any file opened for
writing, created, renamed, removed or any directory made outside the build's
output and cache directories is reported.  Without strace nothing is
claimed: the summary says the builds were not watched.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
GOOD = "tiled_exp.json"  # built next to every group of hostile kernels: it must always be written

Kernels = tuple[str, ...] | None  # corpus file names; None: the whole corpus

# what became of one hostile input; the first three are answers a user can act on
VERDICTS = ("clean refusal", "skipped", "accepted", "internal error", "unnamed refusal", "traceback", "hang",
            "wrong exit")
BAD_VERDICTS = frozenset(("unnamed refusal", "traceback", "hang", "wrong exit"))


@dataclass
class Counts:
    inputs: int = 0
    verdicts: Counter = field(default_factory=Counter)
    bad_inputs: list[str] = field(default_factory=list)   # "file: verdict: detail", every bad or internal one
    builds: int = 0                                       # tusk commands run
    watched: int = 0                                      # of them, under strace
    stray_writes: list[str] = field(default_factory=list)
    semaphores: int = 0       # POSIX semaphores made and removed again in /dev/shm (not stray files)
    semaphores_killed: int = 0  # left in /dev/shm by builds SIGKILLed before they could remove them
    differing_outputs: int = 0
    hangs: int = 0            # environment cases: commands that did not end (hostile inputs: in verdicts)
    tracebacks: int = 0       # environment cases
    kills: int = 0            # kill_rounds: signals sent
    disks_filled: int = 0     # full_disk: first builds that ran out of room
    disks_recovered: int = 0  # of them, rebuilt into the same cache with the clean outputs
    interrupted: int = 0      # of them, those that reached a build still running (not one already finished)
    notes: list[str] = field(default_factory=list)

    def add(self, other: "Counts") -> None:
        for k in ("inputs", "builds", "watched", "semaphores", "semaphores_killed", "differing_outputs", "hangs", "tracebacks", "kills",
                  "interrupted", "disks_filled", "disks_recovered"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.verdicts.update(other.verdicts)
        self.bad_inputs += other.bad_inputs
        self.stray_writes += other.stray_writes
        self.notes += other.notes

    def verdict(self, name: str, verdict: str, detail: str = "") -> None:
        self.inputs += 1
        self.verdicts[verdict] += 1
        if verdict in BAD_VERDICTS or verdict == "internal error":
            self.bad_inputs.append(f"{name}: {verdict}: {detail.strip()[-800:]}")

    def bad(self) -> int:
        return (sum(self.verdicts[v] for v in BAD_VERDICTS) + self.differing_outputs + len(self.stray_writes)
                + self.hangs + self.tracebacks)

    def lines(self) -> list[str]:
        out = [f"hostile inputs, one verdict each   {sum(self.verdicts.values())}"]
        out += [f"  {v:<32} {self.verdicts[v]}" + ("   [0]" if v in BAD_VERDICTS else "") for v in VERDICTS]
        out += [f"tusk commands run                  {self.builds}",
                f"  of them watched by strace        {self.watched}",
                f"writes outside OUT and cache       {len(self.stray_writes)}   [0]"
                + ("" if self.watched == self.builds else f"  (over the {self.watched} watched commands only)"),
                f"  semaphores made and removed      {self.semaphores}  (/dev/shm/sem.*, not counted as writes)",
                f"  semaphores left by SIGKILL       {self.semaphores_killed}  (Python's multiprocessing, in processes "
                "killed before they could remove them; not counted as writes)",
                f"outputs differing from clean build {self.differing_outputs}   [0]",
                f"environment cases: hangs           {self.hangs}   [0]",
                f"environment cases: tracebacks      {self.tracebacks}   [0]"]
        if self.kills:
            out.append(f"builds interrupted by kills        {self.interrupted} of {self.kills}")
        out.append(f"full disks, rebuilt into that cache {self.disks_recovered} of {self.disks_filled} that filled")
        return out


# ---------------------------------------------------------------- running and watching commands


class Sandbox:
    """A scratch area; HOME and TMPDIR point into it, and strace (when present) watches every command."""

    def __init__(self, watch: bool = True) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tusk-faults-"))
        for d in ("cwd", "home", "tmp", "strace"):
            (self.root / d).mkdir()
        self.strace = shutil.which("strace") if watch else None
        self._n = itertools.count()

    def env(self) -> dict[str, str]:
        env = dict(os.environ, HOME=str(self.root / "home"), TMPDIR=str(self.root / "tmp"),
                   PYTHONDONTWRITEBYTECODE="1")
        for v in ("TUSK_CACHE_DIR", "TUSK_WORKERS", "TUSK_SCHEDULER", "MAXHU", "TUSK_ARCH",
                  "TUSK_INSTRUCTION_LIMIT"):
            env.pop(v, None)
        return env

    def watching(self) -> str:
        if self.strace:
            return (f"every command under `strace -f` ({self.strace}): writes anywhere on the file system "
                    "outside its output and cache directories")
        return "NOT watched: strace is not on this machine (apt-get install strace), no stray-write claim is made"

    def wrap(self, cmd: list[str]) -> tuple[list[str], Path | None]:
        if not self.strace:
            return cmd, None
        log = self.root / "strace" / f"b{next(self._n)}"
        log.mkdir()
        return [self.strace, "-f", "-ff", "-y", "-qq", "--seccomp-bpf", "-o", str(log / "t"), "-e",
                "trace=open,openat,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat", *cmd], log

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_CALL = re.compile(r'^(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?')
_PATH = re.compile(r'(?:(AT_FDCWD|\d+)<([^>]*)>,\s*)?"((?:[^"\\]|\\.)*)"')
_IGNORED = ("/dev/null", "/proc/self/", "/dev/tty", "/dev/pts/")


def _written_paths(line: str, cwd: Path) -> list[str]:
    """The paths a traced call wrote to (empty for a read-only open or a failed call)."""
    m = _CALL.match(line)
    if not m or int(m.group(3)) < 0:
        return []
    call, args, result_path = m.group(1), m.group(2), m.group(4)
    if call in ("open", "openat"):
        if not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND", args):
            return []
        return [result_path] if result_path else [_resolve(_PATH.search(args), cwd)]
    if call == "creat" and result_path:
        return [result_path]
    return [_resolve(p, cwd) for p in _PATH.finditer(args)]  # rename*, unlink*, mkdir*: every path named


def _resolve(m: re.Match | None, cwd: Path) -> str:
    if m is None:
        return "?"
    name = m.group(3)
    if name.startswith("/"):
        return name
    return os.path.normpath(os.path.join(m.group(2) or str(cwd), name))  # relative mkdir(): the command's cwd


_SEMAPHORE = re.compile(r"^/dev/shm/sem\.[^/]+$")


def stray_writes(log: Path | None, allowed: list[Path], cwd: Path) -> tuple[list[str], int]:
    """Writes a traced command made outside ``allowed``, and how many POSIX semaphores it made and removed.

    A semaphore (``/dev/shm/sem.*``, Python's multiprocessing) that its command removed again is counted
    apart, not as a stray file; one left behind is a stray file.  The log is removed."""
    if log is None:
        return [], 0
    roots = [os.path.realpath(a) for a in allowed]
    found: dict[str, set[str]] = {}
    for f in log.iterdir():
        for line in f.read_text(errors="replace").splitlines():
            for p in _written_paths(line, cwd):
                real = os.path.realpath(p) if p != "?" else p
                if real.startswith(_IGNORED) or p.startswith(_IGNORED):
                    continue
                if not any(real == r or real.startswith(r + os.sep) for r in roots):
                    found.setdefault(p, set()).add(line.split("(")[0])
    shutil.rmtree(log, ignore_errors=True)
    sems = {p for p, calls in found.items() if _SEMAPHORE.match(p) and calls & {"unlink", "unlinkat"}}
    sems |= _removed_untraced({p for p in found if _SEMAPHORE.match(p)} - sems)
    return sorted(f"{p}  ({', '.join(sorted(calls))})" for p, calls in found.items() if p not in sems), len(sems)


def _removed_untraced(made: set[str], grace: float = 2.0) -> set[str]:
    """The semaphores of ``made`` that are gone within ``grace`` seconds: removed by a process strace no
    longer followed.  A Ctrl-C reaches strace with the build's process group, and strace stops writing the
    log while multiprocessing's resource tracker, which ignores SIGINT, is still removing what the
    interrupted workers left; only a semaphore still in /dev/shm after that is left behind."""
    deadline = time.monotonic() + grace
    while made and any(os.path.exists(p) for p in made) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {p for p in made if not os.path.exists(p)}


@dataclass
class Run:
    returncode: int | None   # None: killed after its timeout
    stdout: str
    stderr: str
    strays: list[str]
    seconds: float

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def run(box: Sandbox, cmd: list[str], allowed: list[Path], timeout: float, c: Counts,
        env: dict[str, str] | None = None) -> Run:
    """``cmd`` in its own process group, watched; a command still running after ``timeout`` is killed."""
    full, log = box.wrap(cmd)
    t = time.monotonic()
    p = subprocess.Popen(full, cwd=str(box.root / "cwd"), env=dict(box.env(), **(env or {})), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    rc: int | None
    try:
        stdout, stderr = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        rc = None
    return finish(box, c, rc, stdout, stderr, log, allowed, time.monotonic() - t)


def finish(box: Sandbox, c: Counts, rc: int | None, stdout: str, stderr: str, log: Path | None,
           allowed: list[Path], seconds: float, sigkilled: bool = False) -> Run:
    """Count one finished command; ``sigkilled``: it was killed with SIGKILL (no process can remove its
    multiprocessing semaphores then: those are counted apart, every other write outside is still a stray)."""
    c.builds += 1
    c.watched += log is not None
    strays, sems = stray_writes(log, allowed, box.root / "cwd")
    if sigkilled:
        left = [w for w in strays if _SEMAPHORE.match(w.split("  (")[0])]
        strays = [w for w in strays if w not in left]
        c.semaphores_killed += len(left)
    c.stray_writes += strays
    c.semaphores += sems
    return Run(rc, stdout, stderr, strays, seconds)


def tusk_cmd(kernels: Path, out: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tusk", "compile", str(kernels), "-o", str(out), "--cache-dir", str(cache),
            "--json", *extra]


def tusk(box: Sandbox, c: Counts, kernels: Path, out: Path, cache: Path, *extra: str, timeout: float = 300) -> Run:
    return run(box, tusk_cmd(kernels, out, cache, *extra), [out, cache], timeout, c)


def outputs(out: Path) -> dict[str, bytes]:
    """What a build produced, without its records (stats.json, the log) and with its own path taken out."""
    return {p.relative_to(out).as_posix(): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("stats.json", "tusk.log", "report.html", "build-trace.json")
            and not p.name.startswith(".")
            and not any(part.startswith(".tusk-") for part in p.relative_to(out).parts)}


def _report(r: Run) -> dict | None:
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        return None
    return rep if isinstance(rep, dict) else None


# ---------------------------------------------------------------- verdicts of hostile inputs


def _from_report(rep: dict, name: str) -> tuple[str, str] | None:
    """The verdict of file ``name`` in one build's --json report (None: the report does not mention it)."""
    stem = Path(name).stem
    for f in rep.get("failed", []):
        if f.get("kernel") == stem:
            err = str(f.get("error", ""))
            if f.get("fault") == "internal":
                return "internal error", err
            if f.get("fault") != "input":
                return "wrong exit", f"a hostile file reported as a fault of kind {f.get('fault')!r}: {err}"
            return ("clean refusal", err) if name in err else ("unnamed refusal", err)
    for s in rep.get("skipped", []):
        if Path(str(s.get("path", ""))).name == name:
            return "skipped", str(s.get("reason", ""))
    for k in rep.get("kernels", []):
        if k.get("kernel") == stem and k.get("status") in ("written", "up to date"):
            return "accepted", ""
    return None


def verdict_alone(r: Run, name: str, timeout: float) -> tuple[str, str]:
    """The verdict of a build of a directory holding file ``name`` alone."""
    if r.returncode is None:
        return "hang", f"no answer within {timeout:.0f} s"
    if "Traceback (most recent call last)" in r.text:
        return "traceback", r.text[-1500:]
    rep = _report(r)
    if rep is None:  # no report: only "nothing to compile" (the file was skipped) is an answer
        if r.returncode == 1 and name in r.stderr and "Traceback" not in r.stderr:
            return ("skipped" if f"skipped {name}" in r.stderr else "clean refusal"), r.stderr[-400:]
        return "wrong exit", f"exit {r.returncode} without a report: {r.text[-600:]}"
    v = _from_report(rep, name)
    if v is None:
        return "wrong exit", f"exit {r.returncode}, the report does not mention the file"
    want = 0 if v[0] == "accepted" else 1
    if r.returncode != want:
        return "wrong exit", f"{v[0]} but exit {r.returncode} (expected {want}): {v[1]}"
    return v


def hostile_alone(box: Sandbox, c: Counts, name: str, data: bytes, label: str, timeout: float) -> None:
    """Build ``name`` alone in its own directory; record its verdict."""
    d = box.root / f"one-{label}" / Path(name).stem
    d.mkdir(parents=True)
    (d / name).write_bytes(data)
    out = box.root / f"out-one-{label}-{Path(name).stem}"
    r = tusk(box, c, d, out, box.root / f"cache-{label}", "--workers", "0", timeout=timeout)
    c.verdict(name, *verdict_alone(r, name, timeout))
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)


def hostile(box: Sandbox, files: list[tuple[str, bytes]], label: str, group: int = 8,
            per_input: float = 120) -> Counts:
    """One verdict per file of ``files``, built ``group`` at a time next to one good kernel.

    A group answers within 30 s plus 10 s a file or is rebuilt file by file, each with ``per_input``
    seconds; so does a group whose outcome cannot be split per file (a traceback, an unexpected exit)."""
    c = Counts()
    for g in range(0, len(files), max(1, group)):
        chunk = files[g:g + max(1, group)]
        if group <= 1:
            for name, data in chunk:
                hostile_alone(box, c, name, data, label, per_input)
            continue
        redo = _hostile_group(box, c, chunk, f"{label}-{g}", label, 30 + 10 * len(chunk))
        for name, data in chunk:
            if name in redo:
                hostile_alone(box, c, name, data, label, per_input)
    return c


def _expected_exit(rep: dict) -> int:
    """The exit code a build's report calls for: 2 if an environment fault is among its failures."""
    faults = {f.get("fault") for f in rep.get("failed", [])}
    return 2 if "environment" in faults else 1 if faults else 0


def _hostile_group(box: Sandbox, c: Counts, chunk: list[tuple[str, bytes]], tag: str, label: str,
                   timeout: float) -> set[str]:
    """Build one group; record the verdicts it settles; the names to rebuild alone."""
    d, out = box.root / f"in-{tag}", box.root / f"out-{tag}"
    d.mkdir()
    for name, data in chunk:
        (d / name).write_bytes(data)
    shutil.copy(EXAMPLES / GOOD, d / GOOD)
    r = tusk(box, c, d, out, box.root / f"cache-{label}", "--workers", "0", timeout=timeout)
    names = {n for n, _ in chunk}
    rep = _report(r)
    why = ("no answer within %.0f s" % timeout if r.returncode is None
           else "a traceback" if "Traceback (most recent call last)" in r.text
           else f"exit {r.returncode} without a report" if rep is None
           else f"exit {r.returncode}, its report says {_expected_exit(rep)}"
           if r.returncode != _expected_exit(rep) else "")
    if why:
        c.notes.append(f"group {tag}: {why}; rebuilt file by file")
        return names
    good = _from_report(rep, GOOD)
    if good is None or good[0] != "accepted" or not (out / "tiled_exp" / "tiled_exp.bir.json").is_file():
        c.differing_outputs += 1
        c.notes.append(f"group {tag}: the good kernel was not written: {good}")
    settled = {n: v for n in names if (v := _from_report(rep, n)) is not None}
    for n, v in sorted(settled.items()):
        c.verdict(n, *v)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return names - settled.keys()


# ---------------------------------------------------------------- hostile kernels: random changes


def klr_mutations(rng: random.Random, per_file: int) -> list[tuple[str, bytes]]:
    """Truncations and bit flips of every corpus KLR file."""
    out = []
    for path in sorted(EXAMPLES.glob("*.klr")):
        data = path.read_bytes()
        for k in range(per_file):
            if k % 2 == 0:
                cut = rng.randrange(0, len(data))
                out.append((f"{path.stem}_trunc{cut}.klr", data[:cut]))
            else:
                b = bytearray(data)
                for _ in range(rng.choice((1, 1, 2, 8))):
                    i = rng.randrange(len(b))
                    b[i] ^= 1 << rng.randrange(8)
                out.append((f"{path.stem}_flip{k}.klr", bytes(b)))
    return out


_HOSTILE_VALUES = [2**63, -2**63 - 1, 2**64 + 7, "__DIGITS5000__", 1e308, -1e308, float("nan"), "zz", "", None, True,
                   [], {}, [[[[[]]]]], -1, 0, 1 << 40, "-inf", "nan", "\u0000", "../../etc/passwd", "/etc/passwd"]


def _mutate_json(rng: random.Random, obj):
    """One random hostile change somewhere in a JSON document (in place; returns the document).

    Deep nesting is inserted as a marker string that :func:`bir_mutations` expands in the text (a JSON
    encoder would refuse to write it)."""
    nodes = []
    stack = [(obj, None, None, 0)]
    while stack:
        x, parent, key, depth = stack.pop()
        nodes.append((x, parent, key))
        if depth > 60:
            continue
        if isinstance(x, dict):
            stack.extend((v, x, k, depth + 1) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, x, i, depth + 1) for i, v in enumerate(x))
    x, parent, key = rng.choice(nodes[1:] or nodes)
    if parent is None:
        return obj
    action = rng.random()
    if action < 0.6:
        parent[key] = rng.choice(_HOSTILE_VALUES)
    elif action < 0.8 and isinstance(parent, dict):
        del parent[key]
    elif action < 0.9:
        parent[key] = f"__DEEP{rng.choice((50, 5000, 100_000))}__"
    elif isinstance(parent, list):
        parent.append(json.loads(json.dumps(x)))
    else:
        parent[f"{key}_copy"] = x
    return obj


def _expand_deep(text: str) -> str:
    text = text.replace('"__DIGITS5000__"', "7" * 5000)  # an integer Python's int() refuses to parse
    return re.sub(r'"__DEEP(\d+)__"', lambda m: "[" * int(m.group(1)) + "0" + "]" * int(m.group(1)), text)


def bir_mutations(rng: random.Random, per_file: int) -> list[tuple[str, bytes]]:
    """Random hostile edits of every corpus BIR-JSON kernel (values, deleted keys, deep nesting, huge numbers)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.json")):
        base = json.loads(path.read_text())
        for k in range(per_file):
            doc = json.loads(json.dumps(base))
            for _ in range(rng.choice((1, 1, 2, 4))):
                doc = _mutate_json(rng, doc)
            out.append((f"{path.stem}_m{k}.json", _expand_deep(json.dumps(doc)).encode()))
    return out


# ---------------------------------------------------------------- hostile kernels: values that only fail together
#
# A change of one value at a time cannot make a shape whose product overflows int64 out of factors that
# each fit, sizes that each fit but not summed, or two locations that overlap: these change several.


def _sets(doc: dict) -> list[dict]:
    return [a for f in doc["functions"] for a in f["allocations"]]


def _locs(doc: dict, onchip: bool = False) -> list[dict]:
    return [m for a in _sets(doc) for m in a["memorylocations"] if not onchip or m.get("type") != "DRAM"]


def _dicts_with(doc, key: str) -> list[dict]:
    found, stack = [], [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            found += [x] if key in x else []
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return found


def _set_all(items: list[dict], key: str, value) -> None:
    for d in items:
        d[key] = json.loads(json.dumps(value))


def _overlap(doc: dict) -> None:
    """Every on-chip location at the first one's address; with only one, a second set over it."""
    locs = _locs(doc, onchip=True)
    if len(locs) == 1:
        s = next(a for a in _sets(doc) if locs[0] in a["memorylocations"])
        twin = json.loads(json.dumps(s))
        twin["name"] += "_twin"
        twin["memorylocations"][0]["name"] += "_twin"
        doc["functions"][0]["allocations"].append(twin)
        return
    for m in locs[1:]:
        m.update(addr=locs[0]["addr"], base=locs[0].get("base", 0), allocated=True)


def _duplicate_set(doc: dict) -> None:
    allocs = doc["functions"][0]["allocations"]
    allocs.append(json.loads(json.dumps(allocs[-1])))


def _ap_overflow(doc: dict) -> None:
    ap = _dicts_with(doc, "ap")[0]
    ap["ap"] = [[2**40, 2**40], [1, 2**40]]


_PRODUCT_MUTATIONS = {
    # item 1 of issue 22: each factor fits int64, the product (2**80) does not
    "shape_2p40x2p40": lambda d: _sets(d)[0].__setitem__("tensor_shape", [2**40, 2**40]),
    "shape_2p32x2p32": lambda d: _sets(d)[-1].__setitem__("tensor_shape", [2**32, 2**32]),  # 2**64: wraps to 0
    "shape_2p62x2": lambda d: _sets(d)[0].__setitem__("tensor_shape", [2**62, 2]),  # 2**63: wraps negative
    "shape_neg_x_neg": lambda d: _sets(d)[0].__setitem__("tensor_shape", [-2**31, -2**33]),  # a positive 2**64
    "shape_minus1_x_minus1": lambda d: _sets(d)[0].__setitem__("tensor_shape", [-1, -1]),  # product 1
    "dims_2p40x2p40": lambda d: _locs(d)[0].__setitem__("dims", [2**40, 2**40]),
    "dims_onchip_2p40x2p40": lambda d: _locs(d, True)[0].__setitem__("dims", [128, 2**40, 2**40]),
    # each location below 2**62 bytes, their sum past 2**63
    "sum_of_sizes": lambda d: (_set_all(_locs(d), "dims", [2**60 - 1]),
                               _set_all(_sets(d), "tensor_shape", [2**60 - 1])),
    "sum_of_onchip_sizes": lambda d: _set_all(_locs(d, True), "dims", [128, 2**15]),  # each fits a partition
    "zero_shape": lambda d: _set_all(_sets(d), "tensor_shape", [0, 0]),
    "zero_dims": lambda d: _set_all(_locs(d), "dims", [0]),
    "zero_ap": lambda d: _set_all(_dicts_with(d, "ap")[:1], "ap", [[1, 0], [1, 0]]),
    "overlapping_locations": _overlap,
    "duplicate_set": _duplicate_set,
    "addr_plus_size_wraps": lambda d: _set_all(_locs(d, True), "addr", 2**63 - 4),
    "ap_extent_2p80": _ap_overflow,
    "loop_trip_product": lambda d: _set_all([x["LoopAxis"] for x in _dicts_with(d, "LoopAxis")], "ub", 2**21),
    "loop_trip_2p40": lambda d: _set_all([x["LoopAxis"] for x in _dicts_with(d, "LoopAxis")], "ub", 2**40),
    "coeff_wraps": lambda d: _set_all(_dicts_with(d, "coeff"), "coeff", 2**62),
}


def bir_product_mutations(names: tuple[str, ...] | None = None, kernels: Kernels = None) -> list[tuple[str, bytes]]:
    """Every multi-value change of :data:`_PRODUCT_MUTATIONS` (or those named) on every corpus BIR-JSON kernel
    (or those of ``kernels``)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.json")) if kernels is None else [EXAMPLES / k for k in kernels]:
        base = json.loads(path.read_text())
        for tag, change in _PRODUCT_MUTATIONS.items():
            if names is not None and tag not in names:
                continue
            doc = json.loads(json.dumps(base))
            try:
                change(doc)
            except (IndexError, KeyError, StopIteration):
                continue  # the kernel has nothing to change this way (no on-chip location, no loop)
            out.append((f"{path.stem}_{tag}.json", json.dumps(doc).encode()))
    return out


def _klr(name: str, shape: tuple[int, ...], sb_shape: tuple[int, ...], addrs: tuple[int, ...] = (0,)) -> bytes:
    from tusk.frontend.klr_writer import KernelWriter

    kw = KernelWriter(name)
    x, y = kw.input("x", shape), kw.output("y", shape)
    tiles = [kw.sbuf(f"t{i}", sb_shape, addr=a) for i, a in enumerate(addrs)]
    kw.dma(tiles[0], x)
    for a, b in zip(tiles, tiles[1:]):
        kw.dma(b, a)
    kw.dma(y, tiles[-1])
    return kw.to_bytes()


_KLR_PRODUCTS = {
    "shape_2p40x2p40": ((2**40, 2**40), (128, 64), (0,)),
    "shape_2p32x2p32": ((2**32, 2**32), (128, 64), (0,)),
    "sb_2p31x2p31": ((128, 64), (128, 2**31, 2**31), (0,)),
    "zero_shape": ((0, 64), (128, 0), (0,)),
    "overlapping_tiles": ((128, 64), (128, 64), (0, 128, 0)),
    "sum_of_tiles": ((128, 2**14), (128, 2**14), (0, 2**16, 2**17, 3 * 2**16)),  # 64 KiB each, 256 KiB in all
    "addr_wraps": ((128, 64), (128, 64), (2**63 - 4,)),
}


def klr_product_mutations() -> list[tuple[str, bytes]]:
    """KLR kernels written with shapes and addresses that fail only together (those the writer can encode)."""
    from tusk.ir.errors import InputError

    out = []
    for tag, (shape, sb, addrs) in _KLR_PRODUCTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the writer warns of numbers past the C++ reader's fields
                out.append((f"klr_{tag}.klr", _klr(f"klr_{tag}", shape, sb, addrs)))
        except (InputError, OverflowError, ValueError):
            continue  # a value the wire format cannot hold at all: nothing to test
    return out


# ---------------------------------------------------------------- a faulty environment


def _tag(kernels: Kernels) -> str:
    return "all" if kernels is None else "-".join(Path(k).stem for k in kernels)


def _corpus(box: Sandbox, kernels: Kernels) -> Path:
    d = box.root / f"corpus-{_tag(kernels)}"
    if not d.exists():
        if kernels is None:
            shutil.copytree(EXAMPLES, d)
        else:
            d.mkdir()
            for k in kernels:
                shutil.copy(EXAMPLES / k, d / k)
    return d


def reference(box: Sandbox, c: Counts, kernels: Kernels) -> dict[str, bytes]:
    """The outputs of an uninterrupted build of the corpus."""
    out = box.root / f"out-reference-{_tag(kernels)}"
    if not out.exists():
        r = tusk(box, c, _corpus(box, kernels), out, _reference_cache(box, kernels), "--workers", "0")
        assert r.returncode == 0, r.text[-3000:]
    return outputs(out)


def _reference_cache(box: Sandbox, kernels: Kernels) -> Path:
    return box.root / f"cache-reference-{_tag(kernels)}"


def _judge_rebuild(c: Counts, r: Run, out: Path, want: dict[str, bytes], what: str) -> None:
    if r.returncode is None:
        c.hangs += 1
        c.notes.append(f"{what}: no answer")
        return
    if "Traceback (most recent call last)" in r.text:
        c.tracebacks += 1
        c.notes.append(f"{what}: {r.text[-1200:]}")
    got = outputs(out)
    if r.returncode != 0 or got != want:
        c.differing_outputs += 1
        diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        c.notes.append(f"{what}: exit {r.returncode}, differing files {diff[:6]}: {r.stderr[-400:]}")


def kill_rounds(box: Sandbox, rng: random.Random, rounds: int, workers: str = "0",
                kernels: Kernels = None) -> Counts:
    """Kill a build at a random moment (SIGKILL or SIGINT), then rebuild: the result must be the clean one."""
    c = Counts()
    want = reference(box, c, kernels)
    corpus = _corpus(box, kernels)
    for r in range(rounds):
        tag = f"{workers}-{_tag(kernels)}-{r}"
        out, cache = box.root / f"out-kill-{tag}", box.root / f"cache-kill-{tag}"
        for attempt in range(2):  # kill the first build, then the rebuild too, before a clean finish
            delay = rng.uniform(0.3, 4.0)
            for _ in range(4):  # a build that finished before its kill tests nothing: again, sooner
                if _kill_once(box, corpus, out, cache, workers, rng, delay, c, r):
                    break
                delay /= 3
        got = tusk(box, c, corpus, out, cache, "--workers", workers, timeout=300)
        _judge_rebuild(c, got, out, want, f"kill round {r} ({workers} workers)")
    return c


def _traced_child(p: subprocess.Popen, traced: bool) -> int:
    """The pid of Tusk itself: under strace, strace's child."""
    if not traced:
        return p.pid
    for _ in range(100):
        try:
            kids = Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()
        except OSError:
            kids = []
        if kids or p.poll() is not None:
            return int(kids[0]) if kids else p.pid
        time.sleep(0.01)
    return p.pid


def _kill_once(box: Sandbox, corpus: Path, out: Path, cache: Path, workers: str, rng: random.Random, delay: float,
               c: Counts, r: int) -> bool:
    """Start a build, signal it after ``delay`` seconds; whether the signal reached it still running."""
    cmd, log = box.wrap(tusk_cmd(corpus, out, cache, "--workers", workers))
    t = time.monotonic()
    p = subprocess.Popen(cmd, cwd=str(box.root / "cwd"), env=box.env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    pid = _traced_child(p, log is not None)
    time.sleep(delay)
    # kill -9 of Tusk alone (its workers must end by themselves), of its process group, or Ctrl-C
    how = rng.choice(("kill tusk", "kill group", "ctrl-c"))
    sig = signal.SIGINT if how == "ctrl-c" else signal.SIGKILL
    running = p.poll() is None
    c.kills += 1
    try:
        os.kill(pid, sig) if how == "kill tusk" else os.killpg(p.pid, sig)
    except ProcessLookupError:
        running = False
    try:
        stdout, stderr = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        c.hangs += 1
        c.notes.append(f"kill round {r}: the build did not end within 60 s of {sig.name}")
    finish(box, c, p.returncode, stdout, stderr, log, [out, cache], time.monotonic() - t,
           sigkilled=sig == signal.SIGKILL)
    interrupted = running and p.returncode != 0
    c.interrupted += interrupted
    if not interrupted:
        c.notes.append(f"kill round {r}: the build had finished (exit {p.returncode}) before its "
                       f"{sig.name} after {delay:.2f} s")
    return interrupted


def concurrent_builds(box: Sandbox, kernels: Kernels = None) -> Counts:
    """Two builds at once on one cache, and on one cache and one output directory: both exit 0, except that
    into one output directory the second may be refused by the first's lock (exit 2, the lock's message)."""
    c = Counts()
    want = reference(box, c, kernels)
    corpus = _corpus(box, kernels)
    for shared_out in (False, True):
        cache = box.root / f"cache-two-{shared_out}-{_tag(kernels)}"
        outs = [box.root / f"out-two-{shared_out}-{_tag(kernels)}-{k}" for k in range(2)]
        if shared_out:
            outs = [outs[0], outs[0]]
        started = []
        for o in outs:
            cmd, log = box.wrap(tusk_cmd(corpus, o, cache, "--workers", "0"))
            started.append((subprocess.Popen(cmd, cwd=str(box.root / "cwd"), env=box.env(), stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True, start_new_session=True), log, o))
        codes = []
        for p, log, o in started:
            t = time.monotonic()
            try:
                stdout, stderr = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                stdout, stderr = p.communicate()
                c.hangs += 1
            run_ = finish(box, c, p.returncode, stdout, stderr, log, [o, cache], time.monotonic() - t)
            if "Traceback (most recent call last)" in run_.text:
                c.tracebacks += 1
                c.notes.append(run_.text[-1000:])
            codes.append(p.returncode if p.returncode != 2 or LOCKED not in stderr else "refused")
        if sorted(map(str, codes)) not in ([["0", "0"], ["0", "refused"]] if shared_out else [["0", "0"]]):
            c.differing_outputs += 1
            c.notes.append(f"concurrent builds (shared output: {shared_out}): exits {codes}")
        for o in dict.fromkeys(outs):
            if outputs(o) != want:
                c.differing_outputs += 1
                c.notes.append(f"concurrent builds (shared output: {shared_out}): outputs differ")
    return c


LOCKED = "is being written by another Tusk build"  # a build refused an output directory another one holds


def can_mount_tmpfs() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs -o size=1M tmpfs /mnt"], capture_output=True, timeout=10
                              ).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# In a private mount namespace, so the small file system goes when the script ends: a tmpfs holding the
# cache, a pad that leaves $3 KiB free, a build that runs out of room, the pad removed, and the same
# command again on the same cache and output.
_FULL_DISK = r"""
D=$1 SIZE=$2 SLACK=$3
shift 3
mount -t tmpfs -o size="$SIZE"k tmpfs "$D" || exit 97
head -c $(( (SIZE - SLACK) * 1024 )) /dev/zero > "$D/pad" 2>/dev/null
timeout -s KILL 300 "$@" > "$R/1.out" 2> "$R/1.err"; echo $? > "$R/1.rc"
df -k "$D" | tail -1 > "$R/df-full"
rm -f "$D/pad"
timeout -s KILL 300 "$@" > "$R/2.out" 2> "$R/2.err"; echo $? > "$R/2.rc"
"""


def full_disk(box: Sandbox, slack_fractions: tuple[float, ...] = (0.5,), kernels: Kernels = None) -> Counts:
    """A cache on a small tmpfs that fills during the build, then the same build into the same cache.

    The first build must fail cleanly (an environment error, exit 2, no traceback); once the space is
    free again the second, into the cache the first one filled, must exit 0 with the clean outputs.
    ``slack_fractions``: the free room left at the start, as shares of what the corpus's cache needs."""
    c = Counts()
    if not can_mount_tmpfs():
        c.notes.append("full disk: NOT RUN (no mount namespace here: unshare -m and mount -t tmpfs refused)")
        return c
    want = reference(box, c, kernels)
    # what the cache occupies, not the sum of its file sizes: a tmpfs gives each small file a whole page
    need_kib = sum(p.stat().st_blocks * 512 for p in _reference_cache(box, kernels).rglob("*")) // 1024
    for k, frac in enumerate(slack_fractions):
        slack = max(16, int(need_kib * frac))
        for attempt in range(4):  # a build that fitted tested nothing: again with half the room
            if _full_disk_once(box, c, kernels, want, need_kib, slack, f"{k}-{attempt}") is not False:
                break
            slack //= 2
    return c


def _full_disk_once(box: Sandbox, c: Counts, kernels: Kernels, want: dict[str, bytes], need_kib: int, slack: int,
                    tag: str) -> bool | None:
    """One filled tmpfs: whether the first build ran out of room (None: it could not be told)."""
    size = 2 * need_kib + 4096  # once the pad is gone: room for the build twice over
    tag = f"{_tag(kernels)}-{tag}"
    mnt, out, res = box.root / f"full-{tag}", box.root / f"out-full-{tag}", box.root / f"full-res-{tag}"
    mnt.mkdir()
    res.mkdir()
    script = ["unshare", "-m", "--propagation", "private", "sh", "-c", _FULL_DISK, "sh", str(mnt), str(size),
              str(slack), *tusk_cmd(_corpus(box, kernels), out, mnt / "store", "--workers", "0")]
    r = run(box, script, [mnt, out, res], 700, c, {"R": str(res)})
    return _judge_full(c, r, res, out, want, f"full disk ({slack} KiB free of the {need_kib} KiB the cache needs)")


def _judge_full(c: Counts, r: Run, res: Path, out: Path, want: dict[str, bytes], what: str) -> bool | None:
    def read(name: str) -> str:
        p = res / name
        return p.read_text(errors="replace") if p.exists() else ""

    if r.returncode == 97:
        c.notes.append(f"{what}: NOT RUN (the tmpfs mount failed)")
        return None
    first, second = read("1.rc").strip(), read("2.rc").strip()
    text1 = read("1.out") + read("1.err")
    filled = "No space left" in text1 or "ENOSPC" in text1 or "Errno 28" in text1
    c.notes.append(f"{what}: first build exit {first or '?'} ({'ran out of room' if filled else 'did NOT fill'}"
                   f"; df at its end: {read('df-full').split()[2:5]}), rebuild into the same cache exit "
                   f"{second or '?'}")
    if r.returncode is None or first in ("", "137") or second in ("", "137"):
        c.hangs += 1
        return None
    if "Traceback (most recent call last)" in text1 + read("2.out") + read("2.err"):
        c.tracebacks += 1
        c.notes.append(f"{what}: {(text1 + read('2.err'))[-1500:]}")
    if filled and first != "2":
        c.differing_outputs += 1
        c.notes.append(f"{what}: the full disk gave exit {first}, not 2 (an environment error): {text1[-600:]}")
    got = outputs(out)
    c.disks_filled += filled
    c.disks_recovered += filled and second == "0" and got == want
    if second != "0" or got != want:
        c.differing_outputs += 1
        diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
        c.notes.append(f"{what}: the rebuild did not recover: exit {second}, differing {diff[:6]}: "
                       f"{read('2.err')[-600:]}")
    return filled
