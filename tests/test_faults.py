"""A small sample of the fault suite (tests/fault_suite.py); ``python bench/faults.py`` runs all of it."""

from __future__ import annotations

import random

import pytest

from tests import fault_suite as fs


@pytest.fixture(scope="module")
def box():
    b = fs.Sandbox()
    yield b
    b.close()


def _clean(c: fs.Counts) -> None:
    assert c.bad() == 0, "\n".join(c.notes)


def test_hostile_klr_and_bir_json_files_end_in_clean_errors(box):
    rng = random.Random(7)
    files = fs.klr_mutations(rng, 4) + fs.bir_mutations(rng, 3)
    c = fs.hostile_batch(box, files, "sample")
    _clean(c)
    assert c.inputs == len(files) and c.clean_errors > 0


def test_killed_builds_rebuild_to_the_clean_result(box):
    c = fs.kill_rounds(box, random.Random(3), 2, "0")
    c.add(fs.kill_rounds(box, random.Random(4), 1, "2"))
    _clean(c)
    # every round killed two builds while they ran (a build that had finished before its kill was retried
    # with a shorter delay and does not count), and each round's rebuild was then judged
    assert c.interrupted == 6 and c.inputs == 3, "\n".join(c.notes)


def test_two_builds_at_once_on_one_cache_and_one_output(box):
    _clean(fs.concurrent_builds(box))


def test_a_full_disk_is_a_clean_environment_error(box):
    c = fs.full_disk(box)
    _clean(c)
