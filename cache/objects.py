"""One module as one Zarr group (format 3): the store's object format.

Layout of an object (``ir.serial`` supplies the parts)::

    <object>/zarr.json          root group; attrs["tusk"] = {format, hash, module (module meta JSON),
                                functions: [{group, name}], complete}
    <object>/f<i>/zarr.json     one subgroup per function; attrs["tusk"] = {name, arrays: [large columns]}
    <object>/f<i>/packed        uint8 array: an 8-byte length, a JSON layout (the function's metadata:
                                pools, flags; and where each small column lies), then every *small*
                                column's bytes
    <object>/f<i>/<table.col>   one typed array per *large* column (>= LARGE_COLUMN bytes),
                                chunked by CHUNK_ROWS rows

The files are written and read directly (metadata JSON and chunk files,
exactly as zarr-python 3 writes them; ``tests/test_cache_store.py`` reads
them back with zarr and compares the metadata): zarr's own API costs ~10 ms
of event-loop round trips per small object, more than the work, and a build
writes one object per step.  Any Zarr v3 reader can open the store.

Every array is compressed with Blosc (LZ4, byte shuffle): on the columns of
a 1.2M-instruction module (155 MB) it wrote in 0.18 s and read in 0.12 s into
1.5 MB, against zstd level 1's 0.29 s / 0.15 s / 7.7 MB and no compression's
0.31 s / 0.09 s / 185 MB (one run on this 2-core machine; the shuffle puts the
mostly-zero high bytes of the integer columns together).  Small columns share
one array because a Zarr array costs a metadata file and a few milliseconds
however small it is; a 50-instruction module is then four small files and
writes in ~5 ms.

``complete`` is written last (the root ``zarr.json`` is rewritten once the
rest exists): an object without it was never finished.  Reading trusts
nothing in the object: every array must have exactly the dtype, shape and
codecs Tusk writes (a crafted object cannot make the reader decode something
huge or unexpected), and the content hash of what was read -- the same digest
as :func:`ir.serial.content_hash`, over the stored canonical parts -- must
equal the object's name.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tusk.ir.canonical import canonical_bytes
from tusk.ir.errors import EnvError
from tusk.ir.module import Module
from tusk.ir.serial import FORMAT_VERSION as SERIAL_FORMAT
from tusk.ir.serial import module_from_parts, parts_hash

OBJECT_FORMAT = 2  # 2: Blosc-LZ4 arrays, array shapes in the head
LARGE_COLUMN = 256 * 1024  # bytes: columns at least this big get an array of their own
CHUNK_ROWS = 1 << 20
PACKED_CHUNK = 8 << 20  # bytes


class ObjectDamaged(EnvError):
    """A stored object is incomplete or its content does not match its name."""


class ObjectOutdated(ObjectDamaged):
    """A stored object of another module format (an older Tusk wrote it, named by that format's digest):
    intact for that Tusk, unusable here -- treated as damaged by reads, told apart by ``tusk cache verify``."""


def _compressors():
    from zarr.codecs import BloscCodec

    return [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]


BLOSC = {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0}
_BLOSC_IDS = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _array_meta(dtype: np.dtype, shape: tuple[int, ...], chunks: tuple[int, ...]) -> dict[str, Any]:
    """The ``zarr.json`` of an array, as zarr-python 3 writes it for ``compressors=_compressors()``."""
    bytes_codec: dict[str, Any] = {"name": "bytes"}
    if dtype.itemsize > 1:
        bytes_codec["configuration"] = {"endian": "little"}
    return {"shape": list(shape), "data_type": dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [bytes_codec, {"name": "blosc", "configuration": {
                "typesize": dtype.itemsize, **BLOSC}}],
            "attributes": {}, "zarr_format": 3, "node_type": "array", "storage_transformers": []}


def _group_meta(attributes: dict[str, Any]) -> bytes:
    return json.dumps({"attributes": attributes, "zarr_format": 3, "node_type": "group"}).encode()


def _blosc(itemsize: int):
    from numcodecs import Blosc

    return Blosc(cname=BLOSC["cname"], clevel=BLOSC["clevel"], shuffle=_BLOSC_IDS[str(BLOSC["shuffle"])],
                 blocksize=BLOSC["blocksize"], typesize=itemsize)


def _write_array(put, path: str, arr: np.ndarray, chunk: int) -> None:
    """One 1-D array: its metadata and its chunks ``c/<i>`` (a chunk is never written partially empty)."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    chunk = max(1, min(len(arr), chunk))
    put(f"{path}/zarr.json", json.dumps(_array_meta(arr.dtype, arr.shape, (chunk,))).encode())
    codec = _blosc(arr.dtype.itemsize)
    for i, start in enumerate(range(0, len(arr), chunk)):
        piece = arr[start:start + chunk]
        if len(piece) < chunk:  # zarr stores edge chunks at full size
            piece = np.concatenate([piece, np.zeros(chunk - len(piece), dtype=arr.dtype)])
        put(f"{path}/c/{i}", bytes(codec.encode(piece)))


def _read_array(get, path: str, dtype: np.dtype, shape: tuple[int, ...], h: str) -> np.ndarray:
    """Array ``path``, read only if its metadata is exactly what :func:`_write_array` writes for
    (``dtype``, ``shape``): a crafted object cannot make the reader decode anything else."""
    raw = get(f"{path}/zarr.json")
    meta = json.loads(raw) if raw is not None else None
    n = shape[0] if shape else 0
    chunk = (meta or {}).get("chunk_grid", {}).get("configuration", {}).get("chunk_shape", [None])[0]
    if (meta is None or not isinstance(chunk, int) or chunk < 1
            or meta != _array_meta(dtype, shape, (chunk,)) or chunk > max(n, 1)):
        raise ObjectDamaged(f"object {h}: array {path.rsplit('/', 2)[-1]} is not what Tusk writes "
                            f"(expected {dtype} {shape} with Blosc-LZ4)")
    out = np.empty(n, dtype=dtype)
    codec = _blosc(dtype.itemsize)
    for i, start in enumerate(range(0, n, chunk)):
        data = get(f"{path}/c/{i}")
        if data is None:
            raise ObjectDamaged(f"object {h}: chunk {i} of {path} is missing")
        stop = min(n, start + chunk)
        expect = chunk * dtype.itemsize
        # the header says how big the chunk decompresses: check it before decompressing anything
        if len(data) < 16 or int.from_bytes(data[4:8], "little") != expect:
            raise ObjectDamaged(f"object {h}: chunk {i} of {path} does not hold {chunk} elements")
        piece = np.frombuffer(codec.decode(data), dtype=dtype)
        if len(piece) != chunk:
            raise ObjectDamaged(f"object {h}: chunk {i} of {path} has the wrong size")
        out[start:stop] = piece[:stop - start]
    return out


def write_parts(put, parts: tuple, h: str) -> None:
    """Write a module's canonical parts (``ir.serial.module_to_parts``, content hash ``h``) as a Zarr v3
    group; ``put(relative path, bytes)`` writes one file of the object."""
    meta, functions = parts
    head: dict[str, Any] = {"format": OBJECT_FORMAT, "serial": SERIAL_FORMAT, "hash": h, "module": meta,
                            "functions": [], "complete": False}
    put("zarr.json", _group_meta({"tusk": head}))
    for i, (arrays, fmeta) in enumerate(functions):
        gname = f"f{i}"
        blobs = []
        packed_index: dict[str, Any] = {}
        offset = 0
        large = []
        for key in sorted(arrays):
            arr = np.ascontiguousarray(arrays[key])
            if arr.nbytes >= LARGE_COLUMN:
                large.append((key, arr))
                continue
            packed_index[key] = [arr.dtype.str, list(arr.shape), offset, arr.nbytes]
            blobs.append(arr.tobytes())
            offset += arr.nbytes
        layout = canonical_bytes({"columns": packed_index, "meta": fmeta})
        packed = np.frombuffer(len(layout).to_bytes(8, "little") + layout + b"".join(blobs), dtype=np.uint8)
        put(f"{gname}/zarr.json", _group_meta({}))
        _write_array(put, f"{gname}/packed", packed, PACKED_CHUNK)
        for key, arr in large:
            _write_array(put, f"{gname}/{key}", arr, CHUNK_ROWS)
        head["functions"].append({"group": gname, "name": fmeta["name"], "packed": len(packed),
                                  "arrays": {k: [a.dtype.str, list(a.shape)] for k, a in large}})
    head["complete"] = True
    put("zarr.json", _group_meta({"tusk": head}))  # the commit: written last


def parse_head(raw: bytes | None, h: str) -> dict[str, Any] | None:
    """The ``tusk`` attributes of a root ``zarr.json``, if it is a complete object named ``h``."""
    if raw is None:
        return None
    try:
        head = json.loads(raw)["attributes"]["tusk"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(head, dict) or head.get("complete") is not True or head.get("hash") != h:
        return None
    if head.get("format") != OBJECT_FORMAT or head.get("serial") != SERIAL_FORMAT:
        return None
    return head


def read_object(get, h: str) -> Module:
    """Decode the object ``h``; raises :class:`ObjectDamaged` unless it is complete and intact.

    ``get(relative path)`` reads one file of the object (None when it does not exist).
    """
    try:
        raw = get("zarr.json")
        head = json.loads(raw)["attributes"].get("tusk") if raw is not None else None
        if not isinstance(head, dict) or head.get("complete") is not True:
            raise ObjectDamaged(f"object {h} is incomplete (no completion marker)")
        if head.get("hash") != h:
            raise ObjectDamaged(f"object {h} claims to be {head.get('hash')}")
        if head.get("serial") != SERIAL_FORMAT:  # its name is another digest of another layout: not damage
            raise ObjectOutdated(f"object {h} was written by another version of Tusk (module format "
                                f"{head.get('serial')!r}, this one reads {SERIAL_FORMAT}): not usable here")
        functions = []
        for entry in head["functions"]:
            g = entry["group"]
            if not isinstance(g, str) or not g.startswith("f") or not g[1:].isdigit():
                raise ObjectDamaged(f"object {h}: bad group name {g!r}")
            packed = _read_array(get, f"{g}/packed", np.dtype(np.uint8), (int(entry["packed"]),), h).tobytes()
            n = int.from_bytes(packed[:8], "little")
            layout = json.loads(packed[8:8 + n])
            fmeta = layout["meta"]
            base = 8 + n
            arrays = {}
            for key, (dt, shape, off, nbytes) in layout["columns"].items():
                dtype = np.dtype(dt)
                arrays[key] = np.frombuffer(packed, dtype=dtype, count=nbytes // dtype.itemsize,
                                            offset=base + off).reshape(shape).copy()
            for key, (dt, shape) in entry["arrays"].items():
                if "/" in key or key.startswith("."):
                    raise ObjectDamaged(f"object {h}: bad array name {key!r}")
                arrays[key] = _read_array(get, f"{g}/{key}", np.dtype(dt), tuple(shape), h)
            functions.append((arrays, fmeta))
        got = parts_hash(head["module"], functions)
        if got != h:
            raise ObjectDamaged(f"object {h} is damaged: its content hashes to {got}")
        return module_from_parts(head["module"], functions)
    except ObjectDamaged:
        raise
    except Exception as e:  # any decoding failure means the bytes are not what was written
        raise ObjectDamaged(f"object {h} cannot be read ({type(e).__name__}: {e})") from None
