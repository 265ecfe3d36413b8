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


def test_a_step_reading_its_input_lets_the_input_before_it_go():
    """Once the kernel's next step has read a step's output, the input that output was made from is dead."""
    tasks.forget_all()
    a, b, c = _modules(3)
    store = type("S", (), {"_damaged": set()})()
    big = 1 << 40
    tasks.remember("a", a, big)
    tasks.remember("b", b, big, parent="a")  # step 1: a -> b
    tasks.remember("c", c, big)              # another kernel's module: untouched
    assert set(tasks._MEMORY) == {"a", "b", "c"}
    assert tasks._load_input(store, "b")[0] is b
    tasks._moved_on("b")                     # what _open does once step 2 has its input
    assert set(tasks._MEMORY) == {"b", "c"}
    tasks._moved_on("b")                     # a second reader (a timing step) changes nothing
    assert set(tasks._MEMORY) == {"b", "c"}
    tasks.forget_all()


def test_a_part_fetched_from_the_store_is_not_kept(tmp_path):
    """A worker that fetched a part runs it and lets both the part and its output go (the merge reads the
    output on the worker that split the step); the worker that split it keeps the output for the merge."""
    from tusk.cache.store import Store
    from tusk.workflows.pipeline import default_pipeline, resolve

    tasks.forget_all()
    store = Store(str(tmp_path / "c"))
    module = large_matmul(2, 3, 2)[0]
    h = store.put(module)
    step = next(s for s in resolve(default_pipeline()).steps if s.name == "unroll").task_spec()
    ctx = {"store": store.url, "verify": False, "check": False, "where": None}
    fetched = tasks.run_part(ctx, step, h, "a1" * 32, {"input": h})
    assert fetched["status"] == "executed", fetched
    assert tasks._MEMORY == {}
    tasks.remember(h, module)
    kept = tasks.run_part(ctx, step, h, "b2" * 32, {"input": h})
    assert kept["status"] == "executed", kept
    assert kept["output"] != h and kept["output"] in tasks._MEMORY
    tasks.forget_all()


def test_a_merge_lets_the_parts_and_their_outputs_go(tmp_path, monkeypatch):
    """Split, parts and merge of one step in one process: afterwards the memo holds the step's input and
    its output, not the pieces or what the parts made of them."""
    from tusk.cache.store import Store
    from tusk.stages.build_fdeps import BuildFDeps
    from tusk.workflows.pipeline import default_pipeline, resolve

    monkeypatch.setattr(BuildFDeps, "split_min", 2)
    monkeypatch.setattr(BuildFDeps, "split_part_size", 5)
    monkeypatch.setattr(BuildFDeps, "split_max_parts", 8)
    tasks.forget_all()
    store = Store(str(tmp_path / "c"))
    from tusk.stages.unroll import Unroll

    module = Unroll().run(large_matmul(2, 3, 2)[0])[0]
    h = store.put(module)
    tasks.remember(h, module)
    step = next(s for s in resolve(default_pipeline()).steps if s.name == "build_fdeps").task_spec()
    ctx = {"store": store.url, "verify": False, "check": False, "where": None}
    split = tasks.split_step(ctx, step, h, "c3" * 32, {"input": h})
    assert split["status"] == "split" and len(split["parts"]) >= 2, split
    # slices of the input: the parts cut them from it, and nothing of the pieces is kept
    assert all(isinstance(piece, dict) and piece["base"] == h for piece in split["parts"]), split
    assert set(tasks._MEMORY) == {h}
    outs = [tasks.run_part(ctx, step, piece, f"{k:02x}" * 32, {"input": f"{k:02x}" * 32, "slice": True})
            for k, piece in enumerate(split["parts"])]
    assert all(o["status"] == "executed" for o in outs), outs
    assert {o["output"] for o in outs} | {h} == set(tasks._MEMORY)
    merged = tasks.merge_step(ctx, step, h, [o["output"] for o in outs], [o.get("stats") or {} for o in outs],
                              "d4" * 32, {"input": h}, 0.0, [1.0] * len(outs))
    assert merged["status"] == "executed", merged
    assert set(tasks._MEMORY) == {h, merged["output"]}
    tasks.forget_all()


def test_a_task_lets_the_units_earlier_modules_go_before_it_loads(tmp_path):
    """A worker that ran parts of an earlier step keeps the base it cut them from; the next task of the unit
    names the unit's earlier modules as dead, and they go before its input is loaded (the input then reuses
    their memory).  The client's list is every module before the current step's input."""
    from tusk.cache.store import Store
    from tusk.workflows.graph import _dead, _State
    from tusk.workflows.pipeline import default_pipeline, resolve

    tasks.forget_all()
    store = Store(str(tmp_path / "c"))
    old, new = _modules(2)
    h_old, h_new = store.put(old), store.put(new)
    tasks.remember(h_old, old)  # the base of an earlier step's slices
    step = next(s for s in resolve(default_pipeline()).steps if s.name == "unroll").task_spec()
    st = _State(report=None, hashes=["host", h_old, h_old, h_new], i=3)  # type: ignore[arg-type]
    assert _dead(st) == sorted(["host", h_old])
    ctx = {"store": store.url, "verify": False, "check": False, "where": None, "dead": _dead(st)}
    done = tasks.run_step(ctx, step, h_new, "e5" * 32, {"input": h_new})
    assert done["status"] == "executed", done
    assert h_old not in tasks._MEMORY and h_new in tasks._MEMORY
    st.i = 1
    assert _dead(st) == ["host"]  # the current input is never dead, even where an earlier step left it as it was
    tasks.forget_all()
