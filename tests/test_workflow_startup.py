"""Worker start-up is start-up: tasks.warm_up imports what the first tasks of a process need, so that no
pass (its run, its verification) is charged the imports -- stats.json, the report and the ETA history show
a pass's own time.  Checked in a fresh interpreter (this one has imported everything long ago)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KLR = ROOT / "tests" / "data" / "klr"

SCRIPT = r'''
import json, sys, time
import tusk.ir.verify as verify_module
from tusk.workflows import tasks

seen = []
def watched(fn, what):
    def call(*a, **k):
        before, t0 = set(sys.modules), time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            seen.append({"what": what(*a), "seconds": time.perf_counter() - t0,
                         "imported": sorted(m for m in set(sys.modules) - before if not m.startswith("encodings"))})
    return call

verify_module.verify = watched(verify_module.verify, lambda m, *a: "verify")
tasks._run = watched(tasks._run, lambda p, step, *a: step["name"])
from tusk.workflows.cli import app
try:
    app(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("RESULT" + json.dumps({"code": code, "calls": seen}))
'''


def test_no_pass_of_an_in_process_build_pays_for_imports(tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    for name in ("01_dma_copy.klr", "02_add_activation.klr", "03_dynamic_loop.klr"):
        shutil.copy(KLR / name, k / name)
    env = dict(os.environ, TUSK_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", SCRIPT, "compile", str(k), "-o", str(tmp_path / "out"),
                          "--workers", "0", "--no-report"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT"))
    out = json.loads(line[len("RESULT"):])
    assert out["code"] in (0, None), res.stderr[-2000:]
    calls = out["calls"]
    assert sum(c["what"] == "verify" for c in calls) >= 3 and any(c["what"] != "verify" for c in calls)
    # a pass's own helper modules (tusk.stages.*_split, a few ms) are its code; anything shared -- numpy.ma,
    # the codecs, the verifier's modules -- is start-up (tasks.warm_up imports it and reports it as start-up)
    paying = [c for c in calls if any(not m.startswith("tusk.stages.") for m in c["imported"])]
    assert paying == [], paying
