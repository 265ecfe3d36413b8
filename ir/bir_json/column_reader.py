"""The loader's columnar path: runs of one-line instructions read column-wise.

See :func:`try_load`: lines that are whole instructions are grouped by their text with every digit
masked, each group's first line is read by the ordinary reader, and the digit runs that differ
between members (clone iteration, offsets, dependency iterations) are parsed with numpy into the
columns.  Anything else (other layouts, other spellings) goes through the ordinary reader, so both
paths build the same module.
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import numpy as np
import orjson

from tusk.ir.bir_json.digits import run_values
from tusk.ir.bir_json.reader import Reader, guarded, open_read
from tusk.ir.enums import ROLE_KEYS
from tusk.ir.errors import TuskError
from tusk.ir.module import INST_SCHEMA, OPERAND_SCHEMA, Function, Module, concat_ranges, distinct, split_clone_name

# ====================================================================== loading


BUILD_LINES = 1 << 14     # lines built column-wise at once
READ_BYTES = 1 << 21       # the file is read this much at a time (temporaries stay below malloc's mmap threshold)
PAD = 32                   # bytes before the read window: a digit run's value reads the 24 bytes before its end
MIN_FAST_BYTES = 1 << 20   # smaller files go to the ordinary reader
LEAF_MAX = 1 << 16         # longer lines are never one instruction
MAX_FAMILIES = 1 << 15     # more distinct line shapes than this: not clone-shaped, use the ordinary reader
DIRECT_READ_BYTES = 16 << 20  # files from this size are scanned past the page cache
MEM_FIELDS = ("memref", "memsetref")
MEM_DIGITS = 12            # digits of one operand's memory names read as slots, at most (packed in an int64)
_DIGITS = bytes.maketrans(b"0123456789", b"##########")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null|[{}\[\]:,]')
_RUN = re.compile(rb"[0-9]+")
_RUN_TEXT = re.compile(r"[0-9]+")
_BYTES = [((1 << 64) - 1) << 8 * (8 - n) & ((1 << 64) - 1) for n in range(9)]  # the last n bytes of a word


class Fallback(Exception):
    """The columnar path does not apply; the ordinary reader takes the file."""


def try_loads(data: bytes, file: str | None) -> Module | None:
    """:func:`try_load` for text in memory."""
    if len(data) < MIN_FAST_BYTES:
        return None
    try:
        return ColumnLoad(file, data).load()
    except (Fallback, TuskError, ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError,
            orjson.JSONDecodeError, UnicodeDecodeError, OSError, EOFError):
        return None


def try_load(path: str) -> Module | None:
    """The module in ``path`` read column-wise, or None: the ordinary reader then reads the file (and
    reports any error in it).  Both build the same module."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if size < (MIN_FAST_BYTES >> 3 if path.endswith(".gz") else MIN_FAST_BYTES):
        return None
    try:
        return ColumnLoad(path).load()
    except (Fallback, TuskError, ValueError, KeyError, IndexError, TypeError, OverflowError, RecursionError,
            orjson.JSONDecodeError, UnicodeDecodeError, OSError, EOFError):
        return None


class _Family:
    """Lines alike but for their digits: which digit runs are slots, and the sub-templates seen so far."""

    __slots__ = ("nruns", "slots", "sign", "long_iter", "slot_end", "slot_len", "slot_lead", "word_at",
                 "word_mask", "generic", "mem")

    def __init__(self, line: bytes):
        self.generic = False
        obj = orjson.loads(line)
        if type(obj) is not dict:
            raise Fallback("not an instruction")
        # a line whose tokens are orjson's own compact form's (spaces apart: Tusk's writer pads numbers) is
        # walked as parsed, 3x faster than tokenising it, with the same runs in the same order
        runs = _runs_of(obj) if orjson.dumps(obj) == _squeezed(line) else _runs_with_paths(line)
        self.nruns = len(runs)
        found = [(m.end(), m.end() - m.start()) for m in _RUN.finditer(line)]
        if self.nruns != len(found):
            raise Fallback("digit runs not accounted for")
        if found and max(n for _, n in found) > 18:
            raise Fallback("a number too long for the columnar path")
        # every line of the family has the same text with digits masked: its digit runs are where this
        # line's are, as long (offsets from the line's start)
        run_end = np.asarray([e for e, _ in found], dtype=np.int64).reshape(-1)
        run_len = np.asarray([n for _, n in found], dtype=np.int64).reshape(-1)
        deps = obj.get("dependencies", [])
        if ("loop_carried_dependencies" in obj or "unroll_dependencies" in obj or "blocks" in obj
                or not _canonical_deps(deps)):
            self.generic = True
        order = _operand_order(obj)
        self.mem = _named_operands(runs, found, order)   # operand -> (role key, index, role, name fields)
        slots: list[tuple[str, int]] = []
        cols: list[int] = []
        sign: list[int] = []
        for r, (path, tok, last, neg) in enumerate(runs):
            kind = None
            if path == ("name",) and tok == "str" and last and type(obj.get("name")) is str \
                    and split_clone_name(obj["name"]):
                kind = ("name", 0)
            elif (len(path) == 3 and path[0] == "dependencies" and path[2] == 0 and tok == "str" and last
                  and type(deps) is list and split_clone_name(deps[path[1]][0])):
                kind = ("dep", path[1])
            elif len(path) == 3 and path[2] == "offset" and tok == "int" and (path[0], path[1]) in order:
                kind = ("off", order[(path[0], path[1])])
            elif len(path) == 3 and path[2] in MEM_FIELDS and tok == "str" and (path[0], path[1]) in order \
                    and order[(path[0], path[1])] in self.mem:
                kind = ("mem", order[(path[0], path[1])])
            if kind is not None:
                slots.append(kind)
                cols.append(r)
                sign.append(-1 if neg else 1)
        self.slots = slots
        slot_cols = np.asarray(cols, dtype=np.int64)
        const_cols = np.setdiff1d(np.arange(self.nruns), slot_cols)
        self.sign = np.asarray(sign, dtype=np.int64)
        iter_slots = [j for j, (k, _) in enumerate(slots) if k in ("name", "dep")]
        # a clone iteration has at most 9 digits: lines with a longer one are read one by one
        self.long_iter = bool(len(iter_slots) and run_len[slot_cols[iter_slots]].max() > 9)
        self.slot_end, self.slot_len = run_end[slot_cols], run_len[slot_cols]
        multi = self.slot_len > 1
        self.slot_lead = (self.slot_end - self.slot_len)[multi]   # where a leading zero would be
        const_end, const_len = run_end[const_cols], run_len[const_cols]
        # the constant runs' bytes as 64-bit words (a run of more than 8 digits is 2 or 3 of them), masked to
        # the run: lines with the same words have the same constants
        words = [(int(e) - 8 * w, min(int(n) - 8 * w, 8), k) for k, (e, n) in enumerate(zip(const_end,
                 const_len)) for w in range((int(n) + 7) // 8)]
        self.word_at = np.asarray([e - 8 for e, _, _ in words], dtype=np.int64).reshape(-1)
        self.word_mask = np.asarray([_BYTES[n] for _, n, _ in words], dtype=np.uint64).reshape(-1)


def _canonical_deps(deps: Any) -> bool:
    if type(deps) is not list:
        return False
    names = set()
    for d in deps:
        if type(d) is not list or len(d) != 2 or type(d[0]) is not str or type(d[1]) is not str or d[0] in names:
            return False
        names.add(d[0])
    return True


def _operand_order(obj: dict) -> dict[tuple[str, int], int]:
    """(role key, index) of each physical_ap operand -> its position among the instruction's operand rows
    (the reader appends ins, then indirection_ins, then outs)."""
    out = {}
    k = 0
    for key in ("ins", "indirection_ins", "outs"):
        ops = obj.get(key, [])
        if type(ops) is not list:
            raise Fallback("operands are not a list")
        for i, o in enumerate(ops):
            if type(o) is dict and o.get("kind") == "physical_ap" and type(o.get("offset")) is int:
                out[(key, i)] = k
            k += 1
    return out


def _named_operands(runs: list, found: list[tuple[int, int]], order: dict) -> dict[int, tuple]:
    """The physical access patterns whose memory names (``memref``, ``memsetref``) have digit runs that
    can be slots: operand position -> (role key, index, role, the fields in line order).  A rotated buffer's
    copies differ only in such digits ("ta_rot1_rot2"); as constants, every combination of them with the
    other operands' made a sub-template of its own (7,389 on large_matmul's output, each read by the
    ordinary reader: a quarter of the load), as slots they are 1,600.  At most ``MEM_DIGITS`` digits per
    operand, so that a line's names pack into one integer (:func:`_named_rows`)."""
    digits: dict[int, int] = {}
    fields: dict[int, list[str]] = {}
    keys: dict[int, tuple[str, int]] = {}
    for (path, tok, _, _), (_, n) in zip(runs, found):
        if len(path) == 3 and path[2] in MEM_FIELDS and tok == "str" and (path[0], path[1]) in order:
            q = order[(path[0], path[1])]
            digits[q] = digits.get(q, 0) + n
            keys[q] = (path[0], path[1])
            if path[2] not in fields.setdefault(q, []):
                fields[q].append(path[2])
    return {q: (*keys[q], ROLE_KEYS.index(keys[q][0]), tuple(fields[q])) for q in digits if digits[q] <= MEM_DIGITS}


def _squeezed(line: bytes) -> bytes | None:
    """``line`` without the blanks outside its strings (None if it has an escape: a quote may be in a string)."""
    if b"\\" in line:
        return None
    pieces = line.split(b'"')
    pieces[0::2] = [p.translate(None, b" \t\r\n") for p in pieces[0::2]]
    return b'"'.join(pieces)


def _runs_of(obj: dict) -> list[tuple[tuple, str, bool, bool]]:
    """:func:`_runs_with_paths` of ``orjson.dumps(obj)``, from the object: its keys and values in order (a
    dict keeps the text's order), each string's and number's digit runs as that text spells them."""
    out: list[tuple[tuple, str, bool, bool]] = []

    def text_runs(path: tuple, kind: str, n: int, neg: bool) -> None:
        out.extend((path, kind, j == n - 1, neg) for j in range(n))

    def walk(v: Any, path: tuple) -> None:
        t = type(v)
        if t is dict:
            for k, x in v.items():
                at = (*path, k)
                text_runs(at, "key", len(_RUN_TEXT.findall(k)), False)
                walk(x, at)
        elif t is list:
            for i, x in enumerate(v):
                walk(x, (*path, i))
        elif t is str:
            text_runs(path, "str", len(_RUN_TEXT.findall(v)), False)
        elif t is int:
            out.append((path, "int", True, v < 0))
        elif t is float:
            spelt = orjson.dumps(v)
            text_runs(path, "num", len(_RUN.findall(spelt)), spelt[:1] == b"-")

    walk(obj, ())
    return out


def _runs_with_paths(line: bytes) -> list[tuple[tuple, str, bool, bool]]:
    """Every run of digits in a one-line JSON object, in order: (path of the value it is in, "key" | "str" |
    "int" | "num", whether it is the token's last run, whether the token is a negative number)."""
    out: list[tuple[tuple, str, bool, bool]] = []
    stack: list[list] = []   # frames: [is_object, key or index, expecting a key]
    pos = 0
    for m in _TOKEN.finditer(line):
        if line[pos:m.start()].strip():
            raise Fallback("unexpected text")
        pos = m.end()
        tok = m.group()
        c = tok[:1]
        if c in (b"{", b"["):
            stack.append([c == b"{", None if c == b"{" else 0, c == b"{"])
            continue
        if c in (b"}", b"]"):
            stack.pop()
            continue
        if c == b":":
            stack[-1][2] = False
            continue
        if c == b",":
            top = stack[-1]
            if top[0]:
                top[2] = True
            else:
                top[1] += 1
            continue
        if c == b'"':
            runs = _RUN.findall(tok)
            if stack and stack[-1][0] and stack[-1][2]:  # an object key
                stack[-1][1] = orjson.loads(tok)
                kind = "key"
            else:
                kind = "str"
            path = _path(stack)
            for k in range(len(runs)):
                out.append((path, kind, k == len(runs) - 1, False))
            continue
        runs = _RUN.findall(tok)
        kind = "int" if _RUN.fullmatch(tok.lstrip(b"-")) else "num"
        for k in range(len(runs)):
            out.append((_path(stack), kind, k == len(runs) - 1, tok[:1] == b"-"))
    if stack or line[pos:].strip():
        raise Fallback("not one whole object")
    return out


def _path(stack: list[list]) -> tuple:
    return tuple(f[1] for f in stack)


def _run_values(whole: np.ndarray, end: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The values of digit runs of ``whole`` ending (exclusive) at ``end`` (lines x runs), each column's
    runs ``length`` digits long."""
    if not end.shape[1]:
        return np.zeros(end.shape, dtype=np.int64)
    lengths = np.empty(end.shape, dtype=np.int64)
    lengths[:] = length
    return run_values(whole, end.reshape(-1), lengths.reshape(-1)).reshape(end.shape)


class _Tables:
    """The families' run positions as tables (a row per family, padded to the widest: padding slots are
    valued 0, padding words are masked to 0, padding leading-zero checks look at the line's "{")."""

    def __init__(self, fams: list[_Family]):
        self.n = len(fams)
        self.generic = np.array([f.generic or f.long_iter for f in fams], dtype=bool)
        self.slot_end = _padded([f.slot_end for f in fams], 1)
        self.slot_len = _padded([f.slot_len for f in fams], 1)
        self.sign = _padded([f.sign for f in fams], 0)
        self.lead = _padded([f.slot_lead for f in fams], 0)
        self.word_at = _padded([f.word_at for f in fams], 0)
        self.word_mask = _padded([f.word_mask for f in fams], 0).astype(np.uint64)
        self.nwords = [len(f.word_at) for f in fams]


def _padded(rows: list[np.ndarray], fill: int) -> np.ndarray:
    out = np.full((len(rows), max(1, *map(len, rows))), fill, dtype=rows[0].dtype if rows else np.int64)
    for k, r in enumerate(rows):
        out[k, :len(r)] = r
    return out


_HASH = np.array([(0x9E3779B97F4A7C15 * (2 * k + 3)) % (1 << 64) | 1 for k in range(64)], dtype=np.uint64)
_FOLD = np.uint64(29)


def _key_hash(fk: np.ndarray, K: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of constant words ``K`` (zero words add nothing, so a row's padding does
    not change it) and family ``fk``: only a first guess, every match is checked word for word."""
    W = K.shape[1]
    mult = _HASH[:W] if W <= len(_HASH) else np.resize(_HASH, W)
    return (K ^ (K >> _FOLD)) @ mult + fk.astype(np.uint64) * _HASH[-1]


class _SubTable:
    """The sub-templates seen, by hash: their hashes sorted, and each one's family and constant words
    (padded with zero words to the widest family), to check a match exactly."""

    def __init__(self) -> None:
        self.hs = np.zeros(0, dtype=np.uint64)      # hashes, ascending
        self.hid = np.zeros(0, dtype=np.int64)      # the sub-template of each
        self.fam = np.zeros(0, dtype=np.int64)      # per sub-template id
        self.words = np.zeros((0, 1), dtype=np.uint64)

    def find(self, fk: np.ndarray, K: np.ndarray) -> np.ndarray:
        """Each row's sub-template, or -1 where none seen has exactly its family and words."""
        out = np.full(len(fk), -1, dtype=np.int64)
        if not len(self.hs):
            return out
        h = _key_hash(fk, K)
        pos = np.minimum(np.searchsorted(self.hs, h), len(self.hs) - 1)
        cand = self.hid[pos]
        W = min(K.shape[1], self.words.shape[1])
        ok = (self.hs[pos] == h) & (self.fam[cand] == fk) & (self.words[cand, :W] == K[:, :W]).all(axis=1)
        if self.words.shape[1] > W:
            ok &= ~self.words[cand, W:].any(axis=1)
        if K.shape[1] > W:
            ok &= ~K[:, W:].any(axis=1)
        out[ok] = cand[ok]
        return out

    def add(self, fk: np.ndarray, K: np.ndarray, ids: np.ndarray) -> None:
        """Sub-templates ``ids`` (new, ascending from the table's size) of families ``fk``, words ``K``."""
        W = max(K.shape[1], self.words.shape[1])
        words = np.zeros((len(self.fam) + len(ids), W), dtype=np.uint64)
        words[:len(self.fam), :self.words.shape[1]] = self.words
        words[ids, :K.shape[1]] = K
        self.words = words
        self.fam = np.concatenate([self.fam, fk])
        hs = np.concatenate([self.hs, _key_hash(fk, K)])
        hid = np.concatenate([self.hid, ids])
        order = np.argsort(hs, kind="stable")
        self.hs, self.hid = hs[order], hid[order]


class _FamilyGuess:
    """A line's family guessed from its length and a sample of its masked text: sixteen 8-byte words spread
    over it, and for a length whose families that sample does not tell apart, words where they differ
    (one hash per line, looked up among the families'); a guess is only a guess, the caller checks it."""

    SAMPLES = 16
    EXTRA = 16   # words added per length, at most

    def __init__(self) -> None:
        self.hs = np.zeros(0, dtype=np.uint64)   # hashes of the families' samples, ascending
        self.hf = np.zeros(0, dtype=np.int64)    # the family of each
        self.length = np.zeros(0, dtype=np.int64)  # per family: its masked text's length (comma included)
        self.text: list[bytes] = []              # per family: that text and a newline
        self.row = np.zeros(LEAF_MAX, dtype=np.int64)   # length -> its row of ``offs`` (0: no family that long)
        self.offs = np.zeros((1, self.SAMPLES), dtype=np.int64)  # per row: the sampled words' offsets
        self.extra = [0]                         # per row: words added

    def hashes(self, text: bytes | bytearray, starts: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The hash of each line's sample (a line of a length no family has: some hash)."""
        lanes = np.ndarray((len(text) - 7,), dtype="<u8", buffer=text, strides=(1,))
        r = self.row[length]
        w = lanes[np.where(r > 0, starts, 0)[:, None] + self.offs[r]]
        return (w ^ (w >> _FOLD)) @ _HASH[:w.shape[1]] + length.astype(np.uint64) * _HASH[-1]

    def find(self, text: bytes | bytearray, starts: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The guessed family of each line (-1: none of that length and sample)."""
        out = np.full(len(starts), -1, dtype=np.int64)
        if not len(self.hs):
            return out
        h = self.hashes(text, starts, length)
        pos = np.minimum(np.searchsorted(self.hs, h), len(self.hs) - 1)
        f = self.hf[pos]
        ok = (self.hs[pos] == h) & (self.length[f] == length)
        out[ok] = f[ok]
        return out

    def add(self, key: bytes) -> None:
        """The next family, of masked text ``key``: the families are hashed again (a word added for
        its length while its sample is another family's of that length)."""
        L = len(key)
        self.length = np.append(self.length, L)
        self.text.append(key + b"\n")
        if L < 8:
            return
        r = int(self.row[L])
        if not r:
            r = self.row[L] = len(self.offs)
            S = self.SAMPLES
            row = np.zeros((1, self.offs.shape[1]), dtype=np.int64)
            row[0, :S] = ((L - 8) * np.arange(S)) // (S - 1)
            self.offs = np.concatenate([self.offs, row])
            self.extra.append(0)
        h1 = self.hashes(key, np.zeros(1, dtype=np.int64), np.array([L]))
        same = self.hf[self.hs == h1[0]]
        if not (self.length[same] == L).any():   # the usual case: its sample tells it apart
            at = int(np.searchsorted(self.hs, h1[0]))
            self.hs, self.hf = np.insert(self.hs, at, h1), np.insert(self.hf, at, len(self.text) - 1)
            return
        joined = b"".join(self.text)
        starts = np.zeros(len(self.text), dtype=np.int64)
        np.cumsum(self.length[:-1] + 1, out=starts[1:])
        fams = np.flatnonzero(self.length >= 8)
        while True:
            h = self.hashes(joined, starts[fams], self.length[fams])
            clash = fams[(h == h[-1]) & (self.length[fams] == L)][:-1]
            if not len(clash) or self.extra[r] == self.EXTRA:
                break
            other = self.text[int(clash[0])]
            d = int(np.flatnonzero(np.frombuffer(key, dtype=np.uint8) != np.frombuffer(other, dtype=np.uint8,
                                                                                       count=L))[0])
            col = self.SAMPLES + self.extra[r]
            if col == self.offs.shape[1]:   # a column more (the other rows sample their first word again)
                self.offs = np.concatenate([self.offs, np.zeros((len(self.offs), 1), dtype=np.int64)], axis=1)
            self.offs[r, col] = min(d, L - 8)
            self.extra[r] += 1
        order = np.argsort(h, kind="stable")
        self.hs, self.hf = h[order], fams[order]


def _scanned(path: str) -> Any:
    """The file the scan reads: a large plain file past the page cache (:class:`DirectReader`: read once, start
    to end, it gains nothing from the cache and this VM makes its pages dear), anything else as usual."""
    if not path.endswith(".gz") and os.path.getsize(path) >= DIRECT_READ_BYTES:
        from tusk.ir.direct_write import DirectReader

        return DirectReader(path)
    return open_read(path)


class _Run:
    __slots__ = ("tids", "slots", "generic")

    def __init__(self) -> None:
        self.tids: list[np.ndarray] = []     # per batch: sub-template id per line (-1 - k: generic line k)
        self.slots: list[np.ndarray] = []    # per batch: (lines, slots) values
        self.generic: list[bytes] = []       # texts of lines read one by one


class ColumnLoad:
    """Scan a file line by line (column-wise for runs of one-line instructions), then read the rest."""

    def __init__(self, path: str | None, data: bytes | None = None):
        self.path, self.data = path, data
        self.nonce = os.urandom(6).hex()
        self.marker = f"\x00tusk-run:{self.nonce}:"  # as read back; the text spells \x00 as \\u0000
        self.skeleton: list[bytes] = []
        self.families: dict[bytes, int] = {}
        self.fams: list[_Family] = []
        self.sub_lines: list[bytes] = []        # sub-template id -> its first line
        self.sub_family: list[int] = []
        self.runs: list[_Run] = []
        self.cur: _Run | None = None
        self.comma = False
        self.protos: dict[int, Any] = {}        # sub-template id -> its rows, in ``protos_of``'s pools
        self.protos_of: Function | None = None    # the function whose pools the prototypes' ids point into
        self.mem_objs: dict[tuple[int, int], dict] = {}  # (sub-template, operand) -> its operand as read
        self.subs: dict[bytes, int] = {}         # (family, constant runs' bytes) -> sub-template id
        self.subtab = _SubTable()                 # the same, found with numpy
        self.guess = _FamilyGuess()               # families found with numpy (checked, then the exact map)
        self.tabled: _Tables | None = None
        self.used = 0
        self.lines = 0

    # ------------------------------------------------------------------ scanning
    def load(self) -> Module:
        if self.data is not None:
            with io.BytesIO(self.data) as fh:
                self.read(fh)
        elif self.path is not None:
            with _scanned(self.path) as fh:
                self.read(fh)
        self.close_run()
        if not self.runs:
            raise Fallback("no run of one-line instructions")
        text = b"".join(self.skeleton)
        self.skeleton = []
        root = orjson.loads(text)
        reader = Reader(self.path)
        reader.expand = self
        module = guarded(reader, lambda: reader.module(root))
        if self.used != len(self.runs):
            raise Fallback("a run was not where instructions are")
        return module

    def read(self, fh: Any) -> None:
        """Scan ``fh`` a window of whole lines at a time, read into one buffer (``PAD`` bytes before the
        window, so that every digit run has eight bytes before its end; a partial last line moves to the
        front for the next read)."""
        area = bytearray(PAD + READ_BYTES)
        keep = 0   # bytes of a partial line at area[PAD:]
        while True:
            if PAD + keep == len(area):   # a line longer than the buffer: a larger one
                area = area[:PAD + keep] + bytearray(len(area))
            with memoryview(area) as mv:
                n = fh.readinto(mv[PAD + keep:])
            if not n:
                break
            end = PAD + keep + n
            cut = area.rfind(b"\n", PAD, end) + 1
            if cut:
                self.scan(area, cut)
                area[PAD:PAD + end - cut] = area[cut:end]
                keep = end - cut
            else:
                keep = end - PAD
        if keep:
            if PAD + keep == len(area):
                area.append(10)
            area[PAD + keep] = 10
            self.scan(area, PAD + keep + 1)

    def close_run(self) -> None:
        if self.cur is not None:
            self.skeleton.append(b",\n" if self.comma else b"\n")
            self.cur = None

    def scan(self, area: bytearray, stop: int) -> None:
        """Scan the lines of ``area[PAD:stop]`` (whole lines, the last ending with a newline)."""
        with memoryview(area) as mv, mv[PAD:stop] as chunk:   # (lines are copied out of it, not the window)
            self.scan_window(area, chunk, stop)

    def scan_window(self, area: bytearray, chunk: memoryview, stop: int) -> None:
        tarea = area.translate(_DIGITS)   # (bytearray's translate: twice as fast as bytes')
        whole = np.frombuffer(area, dtype=np.uint8)
        buf = whole[PAD:stop]
        ends = np.flatnonzero(buf == 10)   # the chunk ends with a newline
        starts = np.zeros(len(ends), dtype=np.int64)
        starts[1:] = ends[:-1] + 1
        length = ends - starts
        safe_s = np.minimum(starts + 1, len(buf) - 1)
        last, before = buf[np.maximum(ends - 1, 0)], buf[np.maximum(ends - 2, 0)]
        leaf = ((length >= 2) & (length < LEAF_MAX) & (buf[starts] == 123) & (buf[safe_s] == 34)
                & ((last == 125) | ((last == 44) & (before == 125))))
        for odd in (92, 35):  # lines with an escape, or a "#" (a digit's mask), are read by the ordinary reader
            if area.find(odd, PAD, stop) >= 0:
                leaf[np.searchsorted(starts, np.flatnonzero(buf == odd), "right") - 1] = False
        if not leaf.any():
            self.close_run()
            self.skeleton.append(bytes(chunk))
            return
        cuts = np.flatnonzero(np.diff(leaf.astype(np.int8))) + 1
        bounds = [0, *cuts.tolist(), len(leaf)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if not leaf[a]:
                self.close_run()
                self.skeleton.append(bytes(chunk[starts[a]:ends[b - 1] + 1]))
                continue
            if self.cur is None:
                self.cur = _Run()
                self.skeleton.append(b'"\\u0000tusk-run:' + self.nonce.encode() + b":" + str(len(self.runs)).encode()
                                     + b'"')
                self.runs.append(self.cur)
            self.batch(chunk, tarea, whole, starts[a:b], ends[a:b])
            self.comma = bool(buf[ends[b - 1] - 1] == 44)

    def batch(self, chunk: memoryview, tarea: bytearray, whole: np.ndarray, ls: np.ndarray, le: np.ndarray) -> None:
        """Lines ``ls``-``le`` of ``chunk`` (``whole[PAD:]``; ``tarea``: ``whole`` with digits masked), all one-line
        instructions: each one's family, slot values and sub-template."""
        run = self.cur
        assert run is not None
        self.lines += len(ls)
        lanes = np.ndarray((len(whole) - 7,), dtype="<u8", buffer=whole, strides=(1,))  # 8 bytes at every offset
        core = le - (whole[PAD + le - 1] == 44)
        fid = self.family_ids(chunk, tarea, ls, le, core)
        tids = np.empty(len(ls), dtype=np.int32)
        T = self.tables()
        gen = T.generic[fid]
        at = ls + PAD   # each line's start in ``whole``
        # every slot of every line at once, on the families' tables padded to the widest
        slots = _run_values(whole, at[:, None] + T.slot_end[fid], T.slot_len[fid]) * T.sign[fid]
        gen |= (whole[at[:, None] + T.lead[fid]] == 48).any(axis=1)   # a slot with a leading zero
        self._generic(run, chunk, ls, core, np.flatnonzero(gen), tids)
        keep = np.flatnonzero(~gen)
        if len(keep):
            # a line's sub-template: its family and the bytes of its constant runs
            fk = fid[keep]
            K = lanes[at[keep, None] + T.word_at[fk]]
            K &= T.word_mask[fk]
            tids[keep] = self.sub_ids(chunk, ls[keep], core[keep], fk, K)
        run.tids.append(tids)
        if len(slots) and np.abs(slots).max() < (1 << 31):
            slots = slots.astype(np.int32)  # kept until the run is read: as small as the values allow
        run.slots.append(slots)

    def family_ids(self, chunk: memoryview, tarea: bytearray, ls: np.ndarray, le: np.ndarray, core: np.ndarray) -> np.ndarray:
        """The family of each line ``ls``-``le`` (``core``: without its comma): guessed from a sample of its
        masked text (:class:`_FamilyGuess`), then checked all at once -- the guesses' texts joined must be
        the lines' masked text, byte for byte; the lines guessed wrong or not at all go through the exact
        map (their masked text as the key)."""
        guess = self.guess
        fid = guess.find(tarea, ls + PAD, le - ls)
        for i in np.flatnonzero(fid < 0).tolist():
            fid[i] = self.family_of(chunk, tarea, int(ls[i]), int(le[i]), int(core[i]))
        a, b = int(ls[0]) + PAD, int(le[-1]) + 1 + PAD
        joined = b"".join(map(guess.text.__getitem__, fid.tolist()))
        if not tarea.startswith(joined, a):
            diff = np.flatnonzero(np.frombuffer(joined, dtype=np.uint8) != np.frombuffer(tarea, dtype=np.uint8,
                                                                                          count=b - a, offset=a))
            for i in distinct(np.searchsorted(ls + PAD, diff + a, "right") - 1).tolist():
                fid[i] = self.family_of(chunk, tarea, int(ls[i]), int(le[i]), int(core[i]))
        return fid

    def family_of(self, chunk: memoryview, tarea: bytearray, s: int, e: int, c: int) -> int:
        """The family of the line ``s``-``e`` of ``chunk`` (``c``: without its comma) by its masked text (a
        new one if none has it; ``tarea``: the masked text, ``PAD`` bytes before ``chunk``)."""
        with memoryview(tarea) as mv:
            key = bytes(mv[PAD + s:PAD + e])
        f = self.families.get(key)
        if f is None:
            if len(self.fams) >= MAX_FAMILIES:
                raise Fallback("too many line shapes")
            f = len(self.fams)
            self.fams.append(_Family(bytes(chunk[s:c])))
            self.families[key] = f
            self.guess.add(key)
        return f

    def sub_ids(self, chunk: memoryview, ls: np.ndarray, core: np.ndarray, fk: np.ndarray, K: np.ndarray) -> np.ndarray:
        """The sub-template of each line (``ls``-``core`` of ``chunk``, family ``fk``, constant words ``K``):
        found by one hash per line in the table of those seen (:class:`_SubTable`, the match checked word
        for word); the lines it does not find go through the exact map (new sub-templates are numbered in
        file order)."""
        ids = self.subtab.find(fk, K)
        miss = np.flatnonzero(ids < 0)
        if not len(miss):
            return ids
        nw = self.tables().nwords
        added = []
        for u in miss.tolist():
            f = int(fk[u])
            row = K[u, :nw[f]]
            sig = f.to_bytes(4, "little") + row.tobytes()
            x = self.subs.get(sig)
            if x is None:
                if len(self.sub_lines) >= max(MAX_FAMILIES, self.lines // 4):
                    raise Fallback("not clone-shaped: most lines would be read one by one anyway")
                x = self.subs[sig] = len(self.sub_lines)
                self.sub_lines.append(bytes(chunk[ls[u]:core[u]]))
                self.sub_family.append(f)
                added.append(u)
            ids[u] = x
        if added:
            self.subtab.add(fk[added], K[added], ids[added])
        return ids

    def tables(self) -> _Tables:
        if self.tabled is None or self.tabled.n != len(self.fams):
            self.tabled = _Tables(self.fams)
        return self.tabled

    @staticmethod
    def _generic(run: _Run, chunk: memoryview, ls: np.ndarray, core: np.ndarray, members: np.ndarray,
                 tids: np.ndarray) -> None:
        for i in members.tolist():
            tids[i] = -1 - len(run.generic)
            run.generic.append(bytes(chunk[ls[i]:core[i]]))

    # ------------------------------------------------------------------ expanding a run while reading
    def run(self, reader: Any, fn: Function, text: str, where: str, block: int) -> None:
        k = int(text.rsplit(":", 1)[1])
        if not 0 <= k < len(self.runs) or self.runs[k] is None:
            raise Fallback("run marker out of place")
        run = self.runs[k]
        self.runs[k] = None  # type: ignore[call-overload]
        self.used += 1
        if fn is not self.protos_of:
            # a prototype's rows hold ids into its function's pools (strings, patterns, records, memory
            # locations): another function with the same line text reads its own prototypes
            self.protos, self.protos_of = {}, fn
        tids = np.concatenate(run.tids)
        run.tids = []
        width = max(s.shape[1] for s in run.slots)
        dtype = np.result_type(*[s.dtype for s in run.slots])
        slots = np.zeros((len(tids), width), dtype=dtype)
        at = 0
        for s in run.slots:
            slots[at:at + len(s), :s.shape[1]] = s
            at += len(s)
        run.slots = []
        # stretches of lines built column-wise, and the lines read one by one, in order
        gen = tids < 0
        cuts = np.flatnonzero(np.diff(gen.astype(np.int8))) + 1
        bounds = [0, *cuts.tolist(), len(tids)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if gen[a]:
                for t in tids[a:b].tolist():
                    reader.inst(fn, orjson.loads(run.generic[-1 - t]), where, block)
            else:
                self.build(reader, fn, tids[a:b], slots[a:b], where, block)

    def read_protos(self, reader: Any, fn: Function, subs: list[int], where: str, block: int) -> None:
        """Read the first lines of sub-templates ``subs`` with the ordinary reader, one after another, and
        keep each one's rows as its prototype: the rows are taken out of the tables once for all of them
        (one flush, one truncation, one rollback of references), not once per prototype."""
        subs = [s for s in subs if s not in self.protos]
        if not subs:
            return
        n_ins, n_ops, mark = len(fn.insts), len(fn.operands), reader.refs.mark()
        checks = (len(reader.deps_to_check), len(reader.carried_to_check))
        op_end = []
        for k, sub in enumerate(subs):
            reader.inst(fn, orjson.loads(self.sub_lines[sub]), where, block)
            if len(fn.insts) != n_ins + k + 1:
                raise Fallback("a template is not one plain instruction")
            op_end.append(len(fn.operands) - n_ops)
        if (len(reader.deps_to_check), len(reader.carried_to_check)) != checks:
            raise Fallback("a template is not one plain instruction")
        ins = {c: fn.insts.column(c)[n_ins:].copy() for c in fn.insts.names}
        ops = {c: fn.operands.column(c)[n_ops:].copy() for c in fn.operands.names}
        refs = reader.refs.rollback(mark)
        fn.insts.truncate(n_ins)
        fn.operands.truncate(n_ops)
        if any(refs["flavour"]):
            raise Fallback("carried references in a template")
        # references come in the order of their instructions: each prototype's are one stretch
        ref_cut = np.searchsorted(np.asarray(refs["dst"], dtype=np.int64), n_ins + np.arange(len(subs) + 1)).tolist()
        op_cut = [0, *op_end]
        for k, sub in enumerate(subs):
            a, b = op_cut[k], op_cut[k + 1]
            r0, r1 = ref_cut[k], ref_cut[k + 1]
            self.protos[sub] = {"row": {c: v[k] for c, v in ins.items()},
                                "ops": {c: v[a:b] for c, v in ops.items()},
                                "refs": {f: v[r0:r1] for f, v in refs.items()},
                                "fam": self.fams[self.sub_family[sub]], "sub": sub}

    def build(self, reader: Any, fn: Function, tids: np.ndarray, slots: np.ndarray, where: str, block: int) -> None:
        """Append the instructions of sub-templates ``tids`` with slot values ``slots``, column-wise (a slice
        of lines at a time, so the temporaries stay small)."""
        subs = distinct(tids)
        index = np.full(int(subs.max()) + 1, -1, dtype=np.int64)
        index[subs] = np.arange(len(subs))
        self.read_protos(reader, fn, subs.tolist(), where, block)
        P = _Prototypes([self.protos[s] for s in subs.tolist()])
        nops_all = P.inst["nops"][index[tids]]
        fn.insts.reserve(len(fn.insts) + len(tids))
        fn.operands.reserve(len(fn.operands) + int(nops_all.sum()))

        def named(spec: tuple, values: list[int]) -> tuple:
            return self.mem_operand(reader, fn, where, spec, values)

        for s0 in range(0, len(tids), BUILD_LINES):
            _append_lines(reader, fn, P, index[tids[s0:s0 + BUILD_LINES]], slots[s0:s0 + BUILD_LINES], block,
                          named)
        fn.invalidate()

    def mem_operand(self, reader: Any, fn: Function, where: str, spec: tuple, values: list[int]) -> tuple:
        """The row of operand ``q`` of sub-template ``sub`` (``spec``: sub, q, role key, index, role, fields) with
        the digit runs of its memory names set to ``values``: the prototype's operand with those names, read
        by the ordinary reader (the same checks and the same row as a line read one by one; it keeps the rows
        it read, and each build's :class:`_NamedRows` asks once per operand and names)."""
        sub, q, key, i, role, fields = spec
        obj = self.mem_objs.get((sub, q))
        if obj is None:
            obj = self.mem_objs[sub, q] = orjson.loads(self.sub_lines[sub])[key][i]
        obj = dict(obj)
        at = 0
        for field in fields:
            pieces = _RUN_TEXT.split(obj[field])
            n = len(pieces) - 1
            obj[field] = "".join(p + str(v) for p, v in zip(pieces, values[at:at + n])) + pieces[-1]
            at += n
        return reader._operand(fn, obj, where, role)


class _Prototypes:
    """A build's sub-template prototypes as tables: instruction columns, operand rows and references
    (concatenated, with each prototype's start), and the slot that fills each of them (-1: none)."""

    def __init__(self, protos: list[dict]):
        nsub = len(protos)
        self.inst = {c: np.array([int(p["row"][c]) for p in protos], dtype=np.int64) for c, _ in INST_SCHEMA}
        self.name_slot = np.full(nsub, -1, dtype=np.int64)
        op_tables: dict[str, list] = {c: [] for c, _ in OPERAND_SCHEMA}
        op_slot: list[np.ndarray] = []
        self.op_start = np.zeros(nsub, dtype=np.int64)
        ref_cols: dict[str, list] = {f: [] for f in ("name", "iter", "kind")}
        ref_slot: list[np.ndarray] = []
        self.ref_start = np.zeros(nsub, dtype=np.int64)
        self.nrefs = np.zeros(nsub, dtype=np.int64)
        # operands whose memory names have slots: (sub-template, operand, role key, index, role, fields) each,
        # the slots of its names in line order and 10 ** each one's digits (to pack a line's values in one int)
        self.mem_specs: list[tuple] = []
        mem_slots: list[list[int]] = []
        mem_pows: list[list[int]] = []
        op_mem: list[np.ndarray] = []
        o = r = 0
        for k, p in enumerate(protos):
            nops = len(p["ops"]["role"])
            osl = np.full(nops, -1, dtype=np.int64)
            oml = np.full(nops, -1, dtype=np.int64)
            nr = len(p["refs"]["dst"])
            rsl = np.full(nr, -1, dtype=np.int64)
            fam = p["fam"]
            named: dict[int, list[int]] = {}
            for j, (kind, q) in enumerate(fam.slots):
                if kind == "name":
                    self.name_slot[k] = j
                elif kind == "off":
                    osl[q] = j
                elif kind == "mem":
                    named.setdefault(q, []).append(j)
                else:
                    rsl[q] = j
            for q, js in named.items():
                oml[q] = len(self.mem_specs)
                self.mem_specs.append((p["sub"], q, *fam.mem[q]))
                mem_slots.append(js)
                mem_pows.append([10 ** int(fam.slot_len[j]) for j in js])
            for c in op_tables:
                op_tables[c].append(p["ops"][c])
            op_slot.append(osl)
            op_mem.append(oml)
            self.op_start[k] = o
            o += nops
            for f in ref_cols:
                ref_cols[f].append(np.asarray(p["refs"][f], dtype=np.int64))
            ref_slot.append(rsl)
            self.ref_start[k] = r
            self.nrefs[k] = nr
            r += nr
        self.ops = {c: np.concatenate(v) for c, v in op_tables.items()}
        self.op_slot = np.concatenate(op_slot)
        self.op_mem = np.concatenate(op_mem)
        if len(self.mem_specs) * _PACKED >= 1 << 63:   # a spec and its names no longer pack in an int64
            raise Fallback("too many operands with named slots")
        self.mem_n = np.array([len(js) for js in mem_slots], dtype=np.int64)
        self.named = _NamedRows()
        width = max([1, *map(len, mem_slots)])
        self.mem_slot = np.full((len(mem_slots), width), -1, dtype=np.int64)
        self.mem_pow = np.ones((len(mem_slots), width), dtype=np.int64)
        for m, (js, pw) in enumerate(zip(mem_slots, mem_pows)):
            self.mem_slot[m, :len(js)] = js
            self.mem_pow[m, :len(pw)] = pw
        self.ref_name, self.ref_iter, self.ref_kind = (np.concatenate(ref_cols[f]) for f in ("name", "iter", "kind"))
        self.ref_slot = np.concatenate(ref_slot)


def _append_lines(reader: Any, fn: Function, P: _Prototypes, local: np.ndarray, sl: np.ndarray, block: int,
                  named: Any) -> None:
    """Append lines of prototypes ``local`` (indices into ``P``) with slot values ``sl`` to ``fn``; ``named(spec,
    values)`` is the row of an operand whose memory names have slots (``P.mem_specs``)."""
    n = len(local)
    rows0 = len(fn.insts)
    lines = np.arange(n)
    ns = P.name_slot[local]
    it = np.where(ns >= 0, sl[lines, np.maximum(ns, 0)], P.inst["iter"][local])
    nops = P.inst["nops"][local]
    J = concat_ranges(P.op_start[local], nops)
    owner = np.repeat(lines, nops)
    OP = {c: v[J] for c, v in P.ops.items()}
    osl = P.op_slot[J]
    OP["offset"] = np.where(osl >= 0, sl[owner, np.maximum(osl, 0)], OP["offset"])
    if len(P.mem_specs):
        _named_rows(OP, P, J, owner, sl, named)
    starts = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(nops[:-1], out=starts[1:])
    starts += len(fn.operands)
    fn.operands.extend(len(J), **OP)
    cols = {c: P.inst[c][local] for c, _ in INST_SCHEMA}
    cols.update(block=block, iter=it, ops=starts)
    fn.insts.extend(n, **cols)
    nr = P.nrefs[local]
    if nr.any():
        K = concat_ranges(P.ref_start[local], nr)
        rowner = np.repeat(lines, nr)
        rsl = P.ref_slot[K]
        riter = np.where(rsl >= 0, sl[rowner, np.maximum(rsl, 0)], P.ref_iter[K])
        reader.refs.add_arrays(dst=(rows0 + rowner).astype(np.int32),
                               block=np.full(len(K), block, dtype=np.int32), name=P.ref_name[K].astype(np.int32),
                               iter=riter.astype(np.int32), kind=P.ref_kind[K].astype(np.int8),
                               flavour=np.zeros(len(K), dtype=np.int8),
                               payload=np.full(len(K), -1, dtype=np.int32))


_PACKED = 10 ** MEM_DIGITS


# what an operand's memory names decide in its row: the rest (pattern, kind, dtype, ...) is the prototype's,
# checked on every row read (a name cannot change it)
NAMED_COLUMNS = ("memloc", "extra")
_NAMED_AT = [[name for name, _ in OPERAND_SCHEMA].index(c) for c in NAMED_COLUMNS]
_SAME_AT = [k for k, (name, _) in enumerate(OPERAND_SCHEMA) if name not in (*NAMED_COLUMNS, "offset")]


def _named_rows(OP: dict[str, np.ndarray], P: _Prototypes, J: np.ndarray, owner: np.ndarray, sl: np.ndarray,
                named: Any) -> None:
    """Set the memory location (and the record of what the line spells otherwise) of the operands whose memory
    names have slots: each one's slot values packed in one integer with its spec, looked up among those met
    before in this build; one ``named`` call per (operand, names) never met."""
    sel = np.flatnonzero(P.op_mem[J] >= 0)
    if not len(sel):
        return
    spec = P.op_mem[J[sel]]
    idx = P.mem_slot[spec]
    vals = np.where(idx >= 0, sl[owner[sel, None], np.maximum(idx, 0)], 0).astype(np.int64)
    packed = np.zeros(len(sel), dtype=np.int64)
    for m in range(idx.shape[1]):
        packed = packed * P.mem_pow[spec, m] + vals[:, m]
    key = spec * _PACKED + packed
    known = P.named
    pos = np.minimum(np.searchsorted(known.keys, key), max(len(known.keys) - 1, 0))
    hit = known.keys[pos] == key if len(known.keys) else np.zeros(len(key), dtype=bool)
    if not hit.all():
        new, first = np.unique(key[~hit], return_index=True)
        first = np.flatnonzero(~hit)[first]
        rows = []
        for f in first.tolist():
            row = named(P.mem_specs[int(spec[f])], vals[f, :P.mem_n[spec[f]]].tolist())
            j = int(J[sel[f]])
            if any(row[k] != P.ops[OPERAND_SCHEMA[k][0]][j] for k in _SAME_AT):
                raise Fallback("a memory name changes more of its operand than the memory location")
            rows.append(row)
        known.add(new, rows)
        pos = np.searchsorted(known.keys, key)
    at = known.row[pos]
    for name, col in zip(NAMED_COLUMNS, known.cols):
        OP[name][sel] = col[at]


class _NamedRows:
    """The operand rows met so far by packed key (:func:`_named_rows`): the keys sorted, and each one's
    ``NAMED_COLUMNS`` (a column array each)."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, dtype=np.int64)
        self.row = np.zeros(0, dtype=np.int64)
        self.cols = [np.zeros(0, dtype=dict(OPERAND_SCHEMA)[c]) for c in NAMED_COLUMNS]

    def add(self, keys: np.ndarray, rows: list[tuple]) -> None:
        n = len(self.cols[0])
        self.cols = [np.concatenate([col, np.array([r[k] for r in rows], dtype=col.dtype)])
                     for k, col in zip(_NAMED_AT, self.cols)]
        keys = np.concatenate([self.keys, keys])
        order = np.argsort(keys, kind="stable")
        self.keys, self.row = keys[order], np.concatenate([self.row, n + np.arange(len(rows))])[order]
