"""Seeded changed kernels (tests/mutated_inputs.py): translated, through the default pipeline, verified and
interpreted in this process, they end in Tusk's own errors or run -- never in an internal error.  The bugs this
found (an address past 2^62, a row with no elements, an access pattern or memory the machine cannot hold) have
tests of their own; ``bench/fuzz_inputs.py`` runs many more cases."""

from __future__ import annotations

from tests.mutated_inputs import fuzz


def test_changed_kernels_end_in_tusks_own_errors(tmp_path):
    found = fuzz(seed=49, cases=25, work=tmp_path)
    counts = found["counts"]
    assert counts["internal"] == 0, found["internal"]
    assert counts["ran"] > 0 and counts["refused"] > 0, counts  # both outcomes are exercised
