"""Golden text per pass (xDSL's habit): a small input file in, the ir/dump.py listing after the pass out.

These catch what equality-based round trips cannot: a field a pass drops
or changes on both sides of a comparison.  Cases: tests/golden_cases.py;
regenerate with ``pytest tests/test_golden.py --update-golden``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.golden_cases import CASES, KERNEL_FILES
from tusk import stages
from tusk.ir import bir_json
from tusk.ir.dump import dump
from tusk.ir.verify import verify

GOLDEN = Path(__file__).resolve().parent / "golden"
PARAMS = [(p, name, spec, build) for p, cases in CASES.items() for name, spec, build in cases]


def test_every_registered_pass_has_golden_cases():
    assert set(CASES) == set(stages.REGISTRY)


@pytest.mark.parametrize("pass_name, case, spec, build", PARAMS, ids=[f"{p}/{n}" for p, n, _, _ in PARAMS])
def test_golden(pass_name, case, spec, build, tmp_path, request):
    d = GOLDEN / pass_name
    source, expected = d / f"{case}.input.json", d / f"{case}.after.txt"
    update = request.config.getoption("--update-golden")
    if update:
        d.mkdir(parents=True, exist_ok=True)
        bir_json.save(build(), source)
    module = bir_json.load(source)
    if pass_name == "translate_nki_ast_to_bir":  # the placeholder names its kernel by basename
        for f in KERNEL_FILES.values():
            shutil.copy(f, tmp_path / f.name)
        module.artifact_dir = str(tmp_path)
    p = stages.parse_pass(spec)
    assert p.name == pass_name
    out, _ = p.run(module)
    verify(out)
    text = f"// {spec}\n{dump(out)}"
    if update:
        expected.write_text(text)
    assert text == expected.read_text(), f"{expected} differs: regenerate with pytest tests/test_golden.py --update-golden"
