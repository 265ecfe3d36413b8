"""Golden text: a small tiled kernel after address_rotation_sb, build_fdeps and schedule (ir/dump.py).

After an intended change:  python -m tests.test_golden_rotation   (rewrites the golden file)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tusk import stages
from tusk.examples import bir_kernels
from tusk.ir.dump import dump

GOLDEN = Path(__file__).resolve().parent / "data" / "golden" / "rotation_schedule_tiled_exp.txt"


def rendered() -> str:
    m, _ = bir_kernels.tiled_exp(tiles=3, width=8)
    m = stages.make_pass("unroll").run(m)[0]
    for spec in ("address_rotation_sb{timing=false}", "build_fdeps", "schedule{timing=false}"):
        m = stages.parse_pass(spec).run(m)[0]
    return dump(m)


def test_rotation_and_schedule_golden_text():
    assert rendered() == GOLDEN.read_text(encoding="utf-8"), "run: python -m tests.test_golden_rotation"


if __name__ == "__main__":
    GOLDEN.write_text(rendered(), encoding="utf-8")
    sys.exit(0)
