"""Without --workers, the build picks in-process or a local cluster by the size and spread of its work."""

from types import SimpleNamespace

import pytest

from tusk.workflows import compile as compile_mod
from tusk.workflows.compile import choose_executor


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch):
    import joblib

    monkeypatch.setattr(joblib, "cpu_count", lambda: 2)


def units(*sizes):
    return [SimpleNamespace(size=s) for s in sizes]


def test_explicit_workers_win():
    assert choose_executor(0, units(10**7)).workers == 0
    assert choose_executor(3, units(10)).workers == 3


def test_a_small_build_stays_in_this_process():
    assert choose_executor(None, units(30_000, 39_000)).workers == 0  # 2 variants: a cluster only breaks even


def test_several_kernels_of_a_mid_sized_build_share_out():
    choice = choose_executor(None, units(33_000, 37_000, 38_500, 41_500))  # 4 variants: 1.2x faster on 2 workers
    assert choice.workers == 2 and "4 unit(s)" in choice.reason


def test_one_kernel_of_a_mid_sized_build_stays_in_this_process():
    assert choose_executor(None, units(150_000)).workers == 0
    assert choose_executor(None, units(140_000, 5_000)).workers == 0  # one unit has nearly all of it


def test_a_large_build_gets_a_cluster_however_it_is_spread():
    assert choose_executor(None, units(compile_mod.AUTO_CLUSTER_INSTRUCTIONS)).workers == 2


def test_one_cpu_means_this_process(monkeypatch):
    import joblib

    monkeypatch.setattr(joblib, "cpu_count", lambda: 1)
    assert choose_executor(None, units(10**6, 10**6)).workers == 0
