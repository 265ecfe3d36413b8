"""docs/frontend.md's nl table is the one the code makes."""

from __future__ import annotations

from pathlib import Path

from tusk.frontend.nki.nl_docs import api_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "frontend.md"
BEGIN, END = "<!-- nl table begin -->\n", "<!-- nl table end -->"


def test_the_nl_table_in_docs_matches_the_code():
    text = DOC.read_text(encoding="utf-8")
    shown = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    assert shown == api_table(), ("docs/frontend.md's nl table is stale: paste api_table() from "
                                  "tusk.frontend.nki.nl_docs between the markers")


def test_the_table_lists_both_generations_of_the_core_calls():
    rows = {line.split(" | ")[0].strip("| `"): line for line in api_table().splitlines()[2:]}
    for name in ("nl.ds", "nl.where", "nl.load_transpose2d", "nl.shared_constant", "nl.fori_loop", "tile.ap"):
        assert name in rows, name
    assert "(pattern, offset=None, scalar_offset=None" in rows["tile.ap"]
