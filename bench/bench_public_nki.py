"""Public NKI kernels, unchanged, through Tusk: how many trace, compile and match their numpy reference.

    python bench/bench_public_nki.py --repos DIR [--group G] [--only SUBSTR] [--jobs 2] [--out results.json]
    python bench/bench_public_nki.py --diff OLD.json NEW.json

DIR holds clones named OWNER+NAME (aws-neuron+nki-samples, aws-neuron+aws-neuron-sdk, aws-neuron+nki-library,
leanprover+KLR); nothing is fetched. Each entry (bench/public_nki/entries_*.py: file, function, inputs,
arguments and a numpy reference written for this bench) runs in its own process: ``tusk trace`` on the upstream
file, then translation, the default pipeline and the interpreter, outputs compared with the reference.
Statuses: matched, expected-refusal (a kernel that is an error on purpose, refused), mismatch, partial (elements never written), no-reference (traced and compiled; nothing to
compare with), compile-failed, refused (the trace's error line), missing (the file is not in DIR).
An entry whose note starts "expected refusal" is a kernel that is wrong on purpose (a docs example of an error,
an upstream file that does not parse): refused, it counts as right.  A reference with a third parameter gets
the kernel's outputs too (kernels that draw random numbers on the device); ``options={"strict": False}`` runs
from random memory without the strict read check (kernels that compute garbage into elements never compared).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from public_nki.entry import Entry  # noqa: E402

GROUPS = ("tutorials", "reference", "contributed", "docs1", "docs2", "library", "klr")
ENTRY_TIMEOUT = 900


def all_entries() -> list[Entry]:
    import public_nki

    found: list[Entry] = []
    for info in sorted(pkgutil.iter_modules(public_nki.__path__), key=lambda i: i.name):
        if info.name.startswith("entries_"):
            found += importlib.import_module(f"public_nki.{info.name}").ENTRIES
    names = Counter(e.name for e in found)
    dup = [n for n, c in names.items() if c > 1]
    if dup:
        raise SystemExit(f"entries named twice: {dup}")
    return found


def run_one(name: str, repos: Path, work: Path) -> dict:
    from public_nki.harness import run_entry

    entry = next(e for e in all_entries() if e.name == name)
    return run_entry(entry, repos, work)


def spawn(entry: Entry, repos: Path, work: Path) -> dict:
    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--one", entry.name, "--repos", str(repos), "--work", str(work)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=ENTRY_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"name": entry.name, "group": entry.group, "status": "timeout", "detail": f"> {ENTRY_TIMEOUT} s"}
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = " | ".join(done.stderr.strip().splitlines()[-2:])
        result = {"name": entry.name, "group": entry.group, "status": "crashed", "detail": tail[:400]}
    result["wall_s"] = round(time.perf_counter() - t0, 2)
    return result


def table(results: list[dict]) -> str:
    by: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        by[r["group"]][r["status"]] += 1
    cols = ("matched", "expected-refusal", "no-reference", "mismatch", "partial", "compile-failed", "refused",
            "other")
    lines = [f"{'group':12} {'n':>4} {'traced':>7} " + " ".join(f"{c:>14}" for c in cols)]
    total: Counter = Counter()
    for g in [*GROUPS, *sorted(set(by) - set(GROUPS))]:
        if g not in by:
            continue
        c = by[g]
        total += c
        lines.append(_row(g, c, cols))
    lines.append(_row("total", total, cols))
    return "\n".join(lines)


def _row(g: str, c: Counter, cols) -> str:
    n = sum(c.values())
    traced = n - c["refused"] - c["expected-refusal"] - c["missing"] - c["timeout"] - c["crashed"]
    other = n - sum(c[k] for k in cols[:-1])
    vals = [c[k] for k in cols[:-1]] + [other]
    right = c["matched"] + c["expected-refusal"]
    return f"{g:12} {n:>4} {traced:>7} " + " ".join(f"{v:>14}" for v in vals) + \
        f"   matched {100 * c['matched'] / max(n, 1):.0f}%, right {100 * right / max(n, 1):.0f}%"


def diff(old: Path, new: Path) -> None:
    a = {r["name"]: r for r in json.loads(old.read_text())}
    b = {r["name"]: r for r in json.loads(new.read_text())}
    for n in sorted(set(a) | set(b)):
        sa, sb = a.get(n, {}).get("status"), b.get(n, {}).get("status")
        if sa != sb:
            print(f"{n:40} {sa} -> {sb}   {b.get(n, {}).get('detail', '')[:120]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", type=Path)
    ap.add_argument("--group", action="append")
    ap.add_argument("--only", action="append", help="run entries whose name contains this (repeat)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--diff", nargs=2, type=Path, metavar=("OLD", "NEW"))
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    opts = ap.parse_args()
    if opts.diff:
        return diff(*opts.diff)
    entries = all_entries()
    if opts.group:
        entries = [e for e in entries if e.group in opts.group]
    if opts.only:
        entries = [e for e in entries if any(s in e.name for s in opts.only)]
    if opts.list:
        for e in entries:
            print(f"{e.group:12} {e.name:40} {e.path}::{e.function or ''}")
        return
    if opts.repos is None:
        raise SystemExit("--repos DIR is required (clones named OWNER+NAME)")
    repos = opts.repos.resolve()
    if opts.one:
        print(json.dumps(run_one(opts.one, repos, opts.work)))
        return
    work = opts.work or Path(tempfile.mkdtemp(prefix="tusk-public-nki-"))
    from public_nki.harness import locate

    for path in {e.path for e in entries if "@" in e.path.partition("/")[0]}:
        locate(path, repos, work)      # extract each OWNER+NAME@REV tree once, before the entries run
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        results = []
        for r in pool.map(lambda e: spawn(e, repos, work), entries):
            print(f"{r['status']:15} {r['name']:40} {r.get('detail', '')[:150]}", flush=True)
            results.append(r)
    print()
    print(table(results))
    print(f"\n{len(results)} entries in {time.perf_counter() - t0:.0f} s")
    if opts.out:
        opts.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
