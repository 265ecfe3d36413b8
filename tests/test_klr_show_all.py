"""Every KLR file KLR wrote is showable (`tusk show` exits 0); the negative fixtures are refused cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tusk.workflows.cli import app

FIXTURES = Path(__file__).parent / "data" / "klr"
POSITIVE = sorted(p for p in FIXTURES.glob("[0-9]*.klr"))
NEGATIVE = sorted(FIXTURES.glob("neg_*.klr"))
runner = CliRunner()


@pytest.mark.parametrize("path", POSITIVE, ids=lambda p: p.stem)
def test_every_klr_fixture_is_showable(path):
    r = runner.invoke(app, ["show", str(path)])
    assert r.exit_code == 0, r.output
    assert "function" in r.output or "kernel " in r.output


@pytest.mark.parametrize("path", NEGATIVE, ids=lambda p: p.stem)
def test_negative_fixtures_are_refused_without_a_traceback(path):
    r = runner.invoke(app, ["show", str(path)])
    assert r.exit_code not in (0, None) and "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_const_tensor_without_its_data_is_listed_by_reference():
    r = runner.invoke(app, ["show", str(FIXTURES / "06_lnc2_shared.klr")])
    assert r.exit_code == 0, r.output
    assert "Const int8[128, 128]" in r.output and "file shared_constants/" in r.output


def test_untranslated_construct_falls_back_to_the_klr_listing_with_a_note():
    r = runner.invoke(app, ["show", str(FIXTURES / "07_access_variants.klr")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("# note: dstBoundsCheck DmaBounds.reg")
    assert "kernel access_variants_kernel" in r.output
