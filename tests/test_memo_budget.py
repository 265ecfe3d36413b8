"""The worker-side module memo (tusk.workflows.tasks.remember) keeps to its byte budget."""

from tusk.examples.bir_kernels import large_matmul
from tusk.workflows import tasks


def _modules(n):
    return [large_matmul(1, 2 + k, 1)[0] for k in range(n)]


def test_memo_evicts_least_recently_used_beyond_budget():
    tasks.forget_all()
    a, b, c = _modules(3)
    sizes = [tasks._module_bytes(m) for m in (a, b, c)]
    assert all(s > 0 for s in sizes)
    budget = sizes[1] + sizes[2]  # room for the last two only
    tasks.remember("a", a, budget)
    tasks.remember("b", b, budget)
    store = type("S", (), {"_damaged": set()})()
    assert tasks._load_input(store, "a")[0] is a  # a is now the most recently used
    tasks.remember("c", c, budget)
    assert set(tasks._MEMORY) == {"a", "c"}  # b, the least recently used, went
    assert sum(sz for _, sz in tasks._MEMORY.values()) <= budget
    assert "b" not in tasks._MEMORY
    tasks.forget_all()


def test_memo_keeps_the_newest_module_even_over_budget():
    tasks.forget_all()
    a, b = _modules(2)
    tasks.remember("a", a, 1)
    tasks.remember("b", b, 1)
    assert list(tasks._MEMORY) == ["b"]  # the next step's input stays; everything older goes
    tasks.forget_all()


def test_memory_budget_is_a_fraction_of_the_memory_setting(monkeypatch):
    monkeypatch.setenv("TUSK_MEMORY", str(64 << 20))
    monkeypatch.setattr(tasks, "_BUDGET", [])
    assert tasks.memory_budget() == (64 << 20) // tasks.MEMO_FRACTION
