"""Golden text per pass (xDSL's habit): a small input file in, the listing after the pass out.

The listing is the user's (:mod:`tusk.ir.listing`, what ``tusk show`` prints).
These catch what equality-based round trips cannot: a field a pass drops
or changes on both sides of a comparison.  Cases: tests/golden_cases.py;
after an intended change, ``pytest tests/test_golden.py --update-golden``
rewrites the expected outputs only (a case's input is written from its
builder only when the file does not exist yet) and prints what changed.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from tests.golden_cases import CASES, KERNEL_FILES
from tusk import stages
from tusk.ir import bir_json
from tusk.ir.listing import listing_text
from tusk.ir.verify import verify

GOLDEN = Path(__file__).resolve().parent / "golden"
PARAMS = [(p, name, spec, build) for p, cases in CASES.items() for name, spec, build in cases]


def test_every_registered_pass_has_golden_cases():
    assert set(CASES) == set(stages.REGISTRY)


def what_changed(path: Path, old: str | None, new: str) -> list[str]:
    """What ``--update-golden`` says about one expected output: nothing when it is unchanged."""
    if old == new:
        return []
    if old is None:
        return [f"new golden {path} ({new.count(chr(10))} lines)"]
    diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{path} (was)", f"{path} (now)",
                                     lineterm=""))
    added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
    removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
    return [f"updated golden {path}: +{added} -{removed} lines", *diff]


def test_what_changed_names_only_real_changes(tmp_path):
    f = tmp_path / "x.after.txt"
    assert what_changed(f, "a\nb\n", "a\nb\n") == []
    assert what_changed(f, None, "a\nb\n") == [f"new golden {f} (2 lines)"]
    out = what_changed(f, "a\nb\n", "a\nc\n")
    assert out[0] == f"updated golden {f}: +1 -1 lines" and "-b" in out and "+c" in out


@pytest.mark.parametrize("pass_name, case, spec, build", PARAMS, ids=[f"{p}/{n}" for p, n, _, _ in PARAMS])
def test_golden(pass_name, case, spec, build, tmp_path, request, capsys):
    d = GOLDEN / pass_name
    source, expected = d / f"{case}.input.json", d / f"{case}.after.txt"
    update = request.config.getoption("--update-golden")
    if update and not source.exists():  # a new case: its input comes from the builder, once
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
    text = f"// {spec}\n{listing_text(out)}"
    if update:
        old = expected.read_text() if expected.exists() else None
        changes = what_changed(expected.relative_to(GOLDEN.parent.parent), old, text)
        if changes:
            expected.write_text(text)
            with capsys.disabled():
                print("\n" + "\n".join(changes))
    assert text == expected.read_text(), f"{expected} differs: regenerate with pytest tests/test_golden.py --update-golden"


def test_tusk_show_prints_the_golden_listing(tmp_path):
    """The goldens pin the user's listing: ``tusk show`` of a pass's output is the golden text."""
    from typer.testing import CliRunner

    from tusk.workflows.cli import app

    pass_name, case, spec, _ = next(c for c in PARAMS if c[0] == "unroll")
    out, _ = stages.parse_pass(spec).run(bir_json.load(GOLDEN / pass_name / f"{case}.input.json"))
    bir_json.save(out, tmp_path / "after.json")
    res = CliRunner().invoke(app, ["show", str(tmp_path / "after.json")])
    assert res.exit_code == 0, res.output
    expected = (GOLDEN / pass_name / f"{case}.after.txt").read_text()
    assert f"// {spec}\n{res.stdout}" == expected
