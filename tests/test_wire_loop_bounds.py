"""Loop bounds written as constant expressions (docs/bir-json.md allows them) compile as the plain integers do."""

from __future__ import annotations

import json
from pathlib import Path

from tusk.ir import bir_json
from tusk.ir.verify import verify
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages.unroll import Unroll

DATA = Path(__file__).parent / "data" / "dynamic_loop_expr_bounds.json"


def _plain_integer_form() -> str:
    doc = json.loads(DATA.read_text())
    for inst in doc["functions"][0]["blocks"][0]["instructions"]:
        ax = inst.get("DynamicForLoopAxis")
        if ax is not None:
            ax["lb"], ax["stride"] = ax["lb"]["c"], ax["stride"]["c"]
    return json.dumps(doc)


def test_dynamic_loop_with_expression_bounds_unrolls_like_plain_integers():
    exprs = bir_json.loads(DATA.read_text())
    plain = bir_json.loads(_plain_integer_form())
    out_exprs, _ = Unroll().run(exprs)
    out_plain, _ = Unroll().run(plain)
    verify(out_exprs)
    inputs = random_inputs(plain, 0)
    want = run(plain, inputs)
    assert same_outputs(run(out_plain, inputs), want)
    assert same_outputs(run(exprs, inputs), want)
    assert same_outputs(run(out_exprs, inputs), want)
