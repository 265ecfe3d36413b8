"""Struct-of-arrays storage: growable column tables and interning pools.

A :class:`Table` keeps one numpy array per column.  Rows are appended as
plain tuples into a pending list and moved into the arrays in one
vectorised step the next time a column is read, so appending is amortised
O(1) with no array copy per row, and bulk appends (:meth:`Table.extend`) are
a handful of numpy slice assignments.

A :class:`Pool` interns values (strings, access patterns, expressions,
attribute records): equal values get one id, so a million cloned
instructions share one record.
"""

from __future__ import annotations

from typing import Any, Generic, Hashable, Iterable, Mapping, Sequence, TypeVar

import numpy as np

from tusk.ir.canonical import canonical_json

T = TypeVar("T")
C = TypeVar("C", bound=str)  # a table's column names (tusk.ir.schema's Literal types)

Schema = tuple[tuple[str, Any], ...]
FLUSH_ROWS = 1 << 18  # bound the temporary of a flush


class Table(Generic[C]):
    """Columns of equal length; each row is one IR object (instruction, operand, ...).

    ``Table[InstCol]``: the column names are a Literal type, so reads by a misspelt name fail the type
    check; code that walks columns by a name it computed uses :meth:`column`."""

    __slots__ = ("schema", "names", "_cols", "_n", "_pending", "_npend")

    def __init__(self, schema: Schema, capacity: int = 8):
        self.schema = schema
        self.names = tuple(name for name, _ in schema)
        self._cols = {name: np.empty(max(capacity, 1), dtype=dt) for name, dt in schema}
        self._n = 0
        self._pending: list[int] = []  # appended rows, flattened (one numpy conversion per flush)
        self._npend = 0

    # ------------------------------------------------------------- size
    def __len__(self) -> int:
        return self._n + self._npend

    def _reserve(self, total: int) -> None:
        cap = len(self._cols[self.names[0]])
        if total <= cap:
            return
        new_cap = max(total, cap * 2, 8)
        for name, arr in self._cols.items():
            grown = np.empty(new_cap, dtype=arr.dtype)
            grown[: self._n] = arr[: self._n]
            self._cols[name] = grown

    # ------------------------------------------------------------- appends
    def append(self, row: tuple) -> int:
        """Append one row of integers given in schema order; returns its index."""
        self._pending.extend(row)
        self._npend += 1
        index = self._n + self._npend - 1
        if self._npend >= FLUSH_ROWS:
            self.flush()
        return index

    def append_rows(self, rows: list[tuple]) -> int:
        """Append several rows; returns the index of the first."""
        start = self._n + self._npend
        pending = self._pending
        for row in rows:
            pending.extend(row)
        self._npend += len(rows)
        if self._npend >= FLUSH_ROWS:
            self.flush()
        return start

    def flush(self) -> None:
        k = self._npend
        if not k:
            return
        width = len(self.schema)
        pending = self._pending
        if len(pending) != k * width:
            pending.clear()
            self._npend = 0
            raise ValueError(f"appended rows must have {width} values each ({', '.join(self.names)})")
        self._reserve(self._n + k)
        n = self._n
        # one C-level conversion of every pending value, then a strided copy per column
        flat = np.array(pending, dtype=np.int64).reshape(k, width)
        for c, (name, dt) in enumerate(self.schema):
            self._cols[name][n : n + k] = flat[:, c]
        self._n = n + k
        pending.clear()
        self._npend = 0

    def reserve(self, total: int) -> None:
        """Make room for ``total`` rows exactly (bulk producers that know their size: no doubling)."""
        self.flush()
        cap = len(self._cols[self.names[0]])
        if total > cap:
            for name, arr in self._cols.items():
                grown = np.empty(total, dtype=arr.dtype)
                grown[: self._n] = arr[: self._n]
                self._cols[name] = grown

    def truncate(self, n: int) -> None:
        """Drop every row from ``n`` on."""
        self.flush()
        if not 0 <= n <= self._n:
            raise ValueError(f"cannot truncate a table of {self._n} rows to {n}")
        self._n = n

    def extend(self, count: int, **columns: Any) -> int:
        """Append ``count`` rows at once; each column is an array or a scalar.

        Returns the index of the first new row.  Columns not given must not
        exist: every column of a row is meaningful.
        """
        self.flush()
        missing = set(self.names) - set(columns)
        if missing:
            raise ValueError(f"extend() is missing columns {sorted(missing)}")
        start = self._n
        self._reserve(start + count)
        for name in self.names:
            self._cols[name][start : start + count] = columns[name]
        self._n = start + count
        return start

    # ------------------------------------------------------------- reads
    def __getitem__(self, name: C) -> np.ndarray:
        """A live view of one column (invalidated by later appends)."""
        return self.column(name)

    def column(self, name: str) -> np.ndarray:
        """``self[name]`` for a name computed at run time (a schema walk); unknown names raise KeyError."""
        if self._npend:
            self.flush()
        return self._cols[name][: self._n]

    def row(self, i: int) -> dict[str, Any]:
        return {name: self.column(name)[i].item() for name in self.names}

    def get(self, name: C, i: int) -> Any:
        if self._npend and i >= self._n:
            self.flush()
        return self._cols[name][i].item()

    def set(self, name: C, i: int, value: Any) -> None:
        if self._npend and i >= self._n:
            self.flush()
        self._cols[name][i] = value

    # ------------------------------------------------------------- whole-table
    def copy(self) -> "Table[C]":
        self.flush()
        out: Table[C] = Table(self.schema, capacity=max(self._n, 1))
        for name in self.names:
            out._cols[name][: self._n] = self._cols[name][: self._n]
        out._n = self._n
        return out

    def take(self, rows: np.ndarray | Sequence[int]) -> "Table[C]":
        """A new table holding the given rows, in the given order."""
        rows = np.asarray(rows, dtype=np.int64)
        return Table.from_arrays(self.schema, {name: self.column(name)[rows] for name in self.names})

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: self.column(name) for name in self.names}

    @staticmethod
    def from_arrays(schema: Schema, arrays: Mapping[str, np.ndarray]) -> "Table":
        """A table over the given columns; arrays of the right dtype are adopted, not copied."""
        n = len(arrays[schema[0][0]]) if schema else 0
        out: Table = Table(schema, capacity=1)
        for name, dt in schema:
            col = np.ascontiguousarray(arrays[name], dtype=dt)
            if col.ndim != 1 or len(col) != n:
                raise ValueError(f"column {name} has shape {col.shape}, expected ({n},)")
            out._cols[name] = col if len(col) else np.empty(1, dtype=dt)
        out._n = n
        return out

    def nbytes(self) -> int:
        self.flush()
        return sum(arr.dtype.itemsize * self._n for arr in self._cols.values())

class Pool(Generic[T]):
    """Interns values: ``add`` returns the id of an equal value already present.

    ``exact=True`` is for pools of one plain type (strings, integer patterns),
    where Python equality already tells values apart and the value is its own key.
    """

    __slots__ = ("items", "_index", "_key")

    def __init__(self, items: Iterable[T] = (), *, exact: bool = False):
        self.items: list[T] = []
        self._index: dict[Hashable, int] = {}
        self._key = _identity if exact else pool_key
        for item in items:
            self.add(item)

    def add(self, value: T) -> int:
        key = self._key(value)
        found = self._index.get(key)
        if found is not None:
            return found
        self.items.append(value)
        self._index[key] = len(self.items) - 1
        return len(self.items) - 1

    def find(self, value: T) -> int:
        """The id of ``value``, or -1."""
        return self._index.get(self._key(value), -1)

    def __getitem__(self, i: int) -> T:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def copy(self) -> "Pool[T]":
        out: Pool[T] = Pool()
        out.items = list(self.items)
        out._index = dict(self._index)
        out._key = self._key
        return out


SMALL_SET = 8  # one_of compares value by value up to this many values


def one_of(column: np.ndarray, values: Iterable[Any]) -> np.ndarray:
    """``np.isin(column, values)`` for a code column against a few of its codes (an operand kind, a memory
    type, an opcode family): one comparison per value.  numpy's isin builds a lookup table for integers,
    20-50x slower than this on a few million rows (0.55 s of a large_matmul build, mostly in liveness)."""
    vals = list(values)
    if len(vals) > SMALL_SET or column.dtype.kind not in "iub":
        return np.isin(column, vals)
    out = np.zeros(column.shape, dtype=bool)
    for v in vals:
        out |= column == v
    return out


def _identity(value: Any) -> Hashable:
    return value


def pool_key(value: Any) -> Hashable:
    """A key that tells apart values Python considers equal (1, 1.0, True)."""
    if isinstance(value, Record):
        return ("json", value.canonical())
    if isinstance(value, float):
        return ("float", repr(value))  # 0.0 and -0.0 are different values
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    if isinstance(value, tuple):
        return ("tuple",) + tuple(pool_key(v) for v in value)
    return value


class Record(dict):
    """An immutable JSON object (attribute bags and unmodelled wire keys).

    Nested objects are Records and nested arrays are tuples, so a Record is
    safe to share between every instruction that has the same attributes.
    """

    __slots__ = ("_canon",)
    _canon: str

    def _readonly(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Record is immutable; build a new one with Record.of(...)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore

    @staticmethod
    def of(obj: Mapping[str, Any] | None = None, **kwargs: Any) -> "Record":
        data = dict(obj or {})
        data.update(kwargs)
        rec = Record()
        dict.update(rec, {k: freeze(v) for k, v in data.items()})
        return rec

    def canonical(self) -> str:
        try:
            return self._canon
        except AttributeError:
            self._canon = canonical_json(self, _json_default)
            return self._canon

    def with_(self, **changes: Any) -> "Record":
        data = dict(self)
        for k, v in changes.items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        return Record.of(data)

    def without(self, *keys: str) -> "Record":
        return Record.of({k: v for k, v in self.items() if k not in keys})

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self.canonical())

    def __reduce__(self):
        raise TypeError("Records are not picklable; serialise them as JSON")


EMPTY = Record()


def freeze(value: Any) -> Any:
    """Deep-convert JSON data: dicts become Records, lists become tuples."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None or t is Record:
        return value  # the common leaves first: this runs for every key of every instruction
    if t is list or t is tuple:
        return tuple(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return Record.of(value)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Deep-convert back to plain JSON data (dicts and lists)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    to_json = getattr(obj, "to_json", None)
    if to_json is not None:
        return to_json()
    raise TypeError(f"not JSON-serialisable: {obj!r}")
