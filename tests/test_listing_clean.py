"""`tusk show` prints what the kernel says, never the reader's internal records: no NUL byte (the reserved
wire-patch key) and no Python dict repr (a constant loop stride) in any listing of the files we ship."""

from __future__ import annotations

from pathlib import Path

import pytest

from tusk.ir.errors import TuskError
from tusk.workflows import show

TESTS = Path(__file__).parent
FILES = sorted([*TESTS.glob("data/klr/[0-9]*.klr"), *TESTS.glob("data/*.json"),
                *TESTS.glob("data/bir_json_evidence/*.json"), *(TESTS.parent / "examples" / "kernels").glob("*")])


def _listing(path: Path) -> str:
    try:
        return "\n".join(show.file_listing(path))
    except TuskError:
        pytest.skip(f"{path.name} is not a kernel tusk show lists")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_listing_has_no_internal_records(path):
    text = _listing(path)
    assert "\x00" not in text
    assert "{'" not in text


def test_constant_expression_stride_is_listed_as_its_value():
    text = _listing(TESTS / "data" / "dynamic_loop_expr_bounds.json")
    assert "k in [1, %r) step 2" in text
