"""The fault suite: hostile inputs and a faulty environment against whole `tusk compile` commands.

``python bench/faults.py`` runs all of it and prints the counts;
``tests/test_faults.py`` runs a small sample in CI.  Every case is a real
command in a subprocess (with a timeout: a hang is counted, not waited for),
in a sandbox whose working directory, HOME and TMPDIR are watched so that a
file written anywhere but the output and cache directories is counted too.

Counts: inputs tried, clean errors, tracebacks (a Python traceback on the
terminal), internal errors (a bug reported cleanly, traceback in the log),
hangs, outputs differing from a clean build, files written outside the output
and cache directories.  Tracebacks, hangs, differing outputs and stray files
must be 0.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "kernels"
GOOD = "tiled_exp.json"  # built next to every batch of hostile kernels: it must always be written


@dataclass
class Counts:
    inputs: int = 0
    clean_errors: int = 0
    tracebacks: int = 0
    internal_errors: int = 0
    hangs: int = 0
    differing_outputs: int = 0
    stray_files: int = 0
    kills: int = 0          # kill_rounds: signals sent
    interrupted: int = 0    # of them, those that reached a build still running (not one already finished)
    notes: list[str] = field(default_factory=list)

    def add(self, other: "Counts") -> None:
        for k in ("inputs", "clean_errors", "tracebacks", "internal_errors", "hangs", "differing_outputs",
                  "stray_files", "kills", "interrupted"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.notes += other.notes

    def bad(self) -> int:
        return self.tracebacks + self.hangs + self.differing_outputs + self.stray_files

    def lines(self) -> list[str]:
        return [f"inputs tried                {self.inputs}",
                f"clean errors                {self.clean_errors}",
                f"tracebacks                  {self.tracebacks}   [0]",
                f"internal errors (logged)    {self.internal_errors}",
                f"hangs                       {self.hangs}   [0]",
                f"outputs differing           {self.differing_outputs}   [0]",
                f"files outside out and cache {self.stray_files}   [0]"]
        + ([f"builds interrupted by kills  {self.interrupted} of {self.kills}"] if self.kills else [])


class Sandbox:
    """A scratch area whose working directory, HOME and TMPDIR are watched for stray files."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tusk-faults-"))
        self.watched = [self.root / "cwd", self.root / "home", self.root / "tmp"]
        for d in self.watched:
            d.mkdir()

    def env(self) -> dict[str, str]:
        env = dict(os.environ, HOME=str(self.root / "home"), TMPDIR=str(self.root / "tmp"),
                   PYTHONDONTWRITEBYTECODE="1")
        for v in ("TUSK_CACHE_DIR", "TUSK_WORKERS", "TUSK_SCHEDULER", "MAXHU", "TUSK_ARCH",
                  "TUSK_INSTRUCTION_LIMIT"):
            env.pop(v, None)
        return env

    def stray(self) -> list[Path]:
        return [p for d in self.watched for p in d.rglob("*") if p.is_file()]

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def tusk(box: Sandbox, kernels: Path, out: Path, cache: Path, *extra: str, timeout: float = 300,
         start: bool = False):
    cmd = [sys.executable, "-m", "tusk", "compile", str(kernels), "-o", str(out), "--cache-dir", str(cache),
           "--json", *extra]
    if start:
        return subprocess.Popen(cmd, cwd=str(box.root / "cwd"), env=box.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    return subprocess.run(cmd, cwd=str(box.root / "cwd"), env=box.env(), capture_output=True, text=True,
                          timeout=timeout)


def outputs(out: Path) -> dict[str, bytes]:
    """What a build produced, without its records (stats.json, the log) and with its own path taken out."""
    return {p.relative_to(out).as_posix(): p.read_bytes().replace(str(out).encode(), b"OUT")
            for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in ("stats.json", "tusk.log", "report.html", "build-trace.json")
            and not p.name.startswith(".")
            and not any(part.startswith(".tusk-") for part in p.relative_to(out).parts)}


def judge(box: Sandbox, proc, n_inputs: int, good: str | None = GOOD, out: Path | None = None) -> Counts:
    """Counts for one finished command over ``n_inputs`` hostile kernels (next to ``good``)."""
    c = Counts(inputs=n_inputs)
    text = (proc.stdout or "") + (proc.stderr or "")
    if "Traceback (most recent call last)" in text:
        c.tracebacks += 1
        c.notes.append(text[-1500:])
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    if report is None:
        if proc.returncode == 2 and "Traceback" not in text:
            c.clean_errors += n_inputs
        else:
            c.notes.append(f"no report, exit {proc.returncode}: {text[-600:]}")
        return c
    failed = {f["kernel"]: f for f in report.get("failed", [])}
    c.internal_errors += sum(1 for f in failed.values() if f.get("fault") == "internal")
    c.clean_errors += sum(1 for f in failed.values() if f.get("fault") != "internal")
    if good is not None and out is not None:
        stem = Path(good).stem
        if stem in failed or not (out / stem / f"{stem}.bir.json").is_file():
            c.differing_outputs += 1
            c.notes.append(f"the good kernel was not written: {failed.get(stem)}")
    strays = box.stray()
    c.stray_files += len(strays)
    c.notes += [f"stray file {p}" for p in strays]
    for p in strays:
        p.unlink()
    return c


# ---------------------------------------------------------------- hostile kernels


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
    import re

    text = text.replace('"__DIGITS5000__"', "7" * 5000)  # an integer Python's int() refuses to parse
    return re.sub(r'"__DEEP(\d+)__"', lambda m: "[" * int(m.group(1)) + "0" + "]" * int(m.group(1)), text)


def bir_mutations(rng: random.Random, per_file: int) -> list[tuple[str, bytes]]:
    """Hostile edits of every corpus BIR-JSON kernel (values, deleted keys, deep nesting, huge numbers)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.json")):
        base = json.loads(path.read_text())
        for k in range(per_file):
            doc = json.loads(json.dumps(base))
            for _ in range(rng.choice((1, 1, 2, 4))):
                doc = _mutate_json(rng, doc)
            out.append((f"{path.stem}_m{k}.json", _expand_deep(json.dumps(doc)).encode()))
    return out


def hostile_batch(box: Sandbox, files: list[tuple[str, bytes]], label: str, timeout: float = 600) -> Counts:
    """Every file of ``files`` next to one good kernel, one command; the good one must be written."""
    d = box.root / f"in-{label}"
    d.mkdir()
    for name, data in files:
        (d / name).write_bytes(data)
    shutil.copy(EXAMPLES / GOOD, d / GOOD)
    out = box.root / f"out-{label}"
    try:
        proc = tusk(box, d, out, box.root / f"cache-{label}", "--workers", "0", timeout=timeout)
    except subprocess.TimeoutExpired:
        return Counts(inputs=len(files), hangs=1, notes=[f"{label}: no answer within {timeout:.0f} s"])
    return judge(box, proc, len(files), out=out)


# ---------------------------------------------------------------- a faulty environment


def _corpus(box: Sandbox, name: str) -> Path:
    d = box.root / name
    if not d.exists():
        shutil.copytree(EXAMPLES, d)
    return d


def reference(box: Sandbox) -> dict[str, bytes]:
    """The outputs of an uninterrupted build of the corpus."""
    out = box.root / "out-reference"
    if not out.exists():
        proc = tusk(box, _corpus(box, "corpus"), out, box.root / "cache-reference", "--workers", "0")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return outputs(out)


def kill_rounds(box: Sandbox, rng: random.Random, rounds: int, workers: str = "0") -> Counts:
    """Kill a build at a random moment (SIGKILL or SIGINT), then rebuild: the result must be the clean one."""
    want = reference(box)
    c = Counts()
    corpus = _corpus(box, "corpus")
    for r in range(rounds):
        out, cache = box.root / f"out-kill-{workers}-{r}", box.root / f"cache-kill-{workers}-{r}"
        for attempt in range(2):  # kill the first build, then the rebuild too, before a clean finish
            delay = rng.uniform(0.3, 4.0)
            for _ in range(4):  # a build that finished before its kill tests nothing: again, sooner
                if _kill_once(box, corpus, out, cache, workers, rng, delay, c, r):
                    break
                delay /= 3
        try:
            proc = tusk(box, corpus, out, cache, "--workers", workers, timeout=300)
        except subprocess.TimeoutExpired:
            c.hangs += 1
            continue
        c.inputs += 1
        got = judge(box, proc, 0, good=None)
        c.add(got)
        if proc.returncode != 0 or outputs(out) != want:
            c.differing_outputs += 1
            c.notes.append(f"kill round {r} ({workers} workers): exit {proc.returncode}, "
                           f"outputs {'differ' if outputs(out) != want else 'same'}: {proc.stderr[-400:]}")
    return c


def _kill_once(box: Sandbox, corpus: Path, out: Path, cache: Path, workers: str, rng: random.Random, delay: float,
               c: Counts, r: int) -> bool:
    """Start a build, signal it after ``delay`` seconds; whether the signal reached it still running."""
    p = tusk(box, corpus, out, cache, "--workers", workers, start=True)
    time.sleep(delay)
    # kill -9 of Tusk alone (its workers must end by themselves), of its process group, or Ctrl-C
    how = rng.choice(("kill tusk", "kill group", "ctrl-c"))
    sig = signal.SIGINT if how == "ctrl-c" else signal.SIGKILL
    running = p.poll() is None
    c.kills += 1
    try:
        p.send_signal(sig) if how == "kill tusk" else os.killpg(p.pid, sig)
    except ProcessLookupError:
        running = False
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        c.hangs += 1
        c.notes.append(f"kill round {r}: the build did not end within 60 s of {sig.name}")
    interrupted = running and p.returncode != 0
    c.interrupted += interrupted
    if not interrupted:
        c.notes.append(f"kill round {r}: the build had finished (exit {p.returncode}) before its "
                       f"{sig.name} after {delay:.2f} s")
    return interrupted


def concurrent_builds(box: Sandbox) -> Counts:
    """Two builds at once on one cache, and on one cache and one output directory."""
    want = reference(box)
    c = Counts()
    corpus = _corpus(box, "corpus")
    for shared_out in (False, True):
        cache = box.root / f"cache-two-{shared_out}"
        outs = [box.root / f"out-two-{shared_out}-{k}" for k in range(2)]
        if shared_out:
            outs = [outs[0], outs[0]]
        procs = [tusk(box, corpus, o, cache, "--workers", "0", start=True) for o in outs]
        for p, o in zip(procs, outs):
            try:
                stdout, stderr = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                c.hangs += 1
                continue
            c.inputs += 1
            if "Traceback" in stdout + stderr:
                c.tracebacks += 1
                c.notes.append(stderr[-1000:])
        for o in set(outs):
            if outputs(o) != want:
                c.differing_outputs += 1
                c.notes.append(f"concurrent builds (shared output: {shared_out}): outputs differ")
    c.stray_files += len(box.stray())
    return c


def _can_mount_tmpfs() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs -o size=1M tmpfs /mnt"], capture_output=True, timeout=10
                              ).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def full_disk(box: Sandbox) -> Counts:
    """A cache on a full file system (a 2 MB tmpfs): a clean environment error, then a clean rebuild."""
    c = Counts()
    if not _can_mount_tmpfs():
        c.notes.append("full disk: skipped (no mount namespaces here)")
        return c
    corpus = _corpus(box, "corpus")
    cache, out = box.root / "cache-full", box.root / "out-full"
    cache.mkdir()
    script = (f'mount -t tmpfs -o size=2M tmpfs "{cache}" && exec "$@"')
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", sys.executable, "-m", "tusk",
           "compile", str(corpus), "-o", str(out), "--cache-dir", str(cache / "store"), "--workers", "0", "--json"]
    proc = subprocess.run(cmd, cwd=str(box.root / "cwd"), env=box.env(), capture_output=True, text=True,
                          timeout=300)
    c.inputs += 1
    text = proc.stdout + proc.stderr
    if "Traceback" in text:
        c.tracebacks += 1
        c.notes.append(text[-1500:])
    elif proc.returncode == 2:
        c.clean_errors += 1
    else:
        c.notes.append(f"full disk: exit {proc.returncode} (expected 2)")
    proc = tusk(box, corpus, out, box.root / "cache-after-full", "--workers", "0")  # room again
    if proc.returncode != 0 or outputs(out) != reference(box):
        c.differing_outputs += 1
        c.notes.append(f"after the full disk: exit {proc.returncode}")
    return c
