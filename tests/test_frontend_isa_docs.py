"""docs/frontend.md's nisa table is the one the code makes: every supported call of both generations with
its documented signature."""

from __future__ import annotations

from pathlib import Path

from tusk.frontend.nki.isa_signature import api_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "frontend.md"
BEGIN, END = "<!-- nisa table begin -->\n", "<!-- nisa table end -->"


def test_the_nisa_table_in_docs_matches_the_code():
    text = DOC.read_text(encoding="utf-8")
    shown = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    assert shown == api_table(), ("docs/frontend.md's nisa table is stale: paste api_table() from "
                                  "tusk.frontend.nki.isa_signature between the markers")


def test_the_table_lists_both_generations_of_the_core_calls():
    rows = {line.split(" | ")[0].strip("| `") : line for line in api_table().splitlines()[2:]}
    for name in ("nisa.dma_copy", "nisa.nc_matmul", "nisa.tensor_copy", "nisa.activation", "nisa.iota"):
        assert "—" not in rows[name], name
    assert "(dst, stationary, moving" in rows["nisa.nc_matmul"]
