"""Kernel files in, host modules out: what a build starts from.

A directory's files are classified (sorted by name):

* ``.klr`` (or any file starting with the KLR/CBOR magic): a KLR kernel;
* ``.json`` whose top level has ``"functions"``: a BIR-JSON kernel (one
  function per logical core; its arguments are the unallocated DRAM memory
  locations of the first function whose set is an input or output kind), or
  -- if it already holds
  ``InstNKIKLIRKernel`` placeholders -- a host module, taken as it is;
* anything else is listed as skipped, with the reason -- ``.py`` files too:
  nothing here runs Python.  Kernels written in Python are those the
  directory's ``tusk.toml`` names (``[kernels.NAME]``); the build traces
  them into KLR (:mod:`tusk.workflows.traced`) and adds them after discovery.

A kernel that cannot be read is a failed kernel (its TuskError names the
file), not a skipped one -- also a ``.klr``/``.json`` entry that is not a
readable regular file (a dangling link, a device).

**Names.**  A kernel's name (its output directory) is the file's stem;
when several *kernel* files share a stem, each of them is named by its
whole file name instead (``a.klr``, ``a.json``).  Only kernel files take
part, so an unrelated ``a.md`` renames nothing, and no two kernels share a
name (a whole file name can equal another file's stem only if that stem is
shared too, and then that file switches as well).

Every kernel becomes one host module per logical core, exactly what the
backend hands to ``translate_nki_ast_to_bir``: a ``main`` function holding
host DRAM tensors named, shaped and typed like the kernel's DRAM inputs and
outputs, and one InstNKIKLIRKernel placeholder (opcode 56) whose
``klir_binary`` is the kernel file (``kernel_format`` "bir" for BIR-JSON,
"klr" otherwise).  Its ``neuron_core_id`` is the core and its artifact
directory the kernel's output directory.  A host module taken as it is gets
the same artifact directory, and each placeholder's kernel file is resolved
now -- relative paths against the module file's directory, else the
module's own artifact directory + basename (the backend's rule) -- and
written back as an absolute path; a placeholder whose file is nowhere is a
failed kernel (a previous output must not stand in for it).

The host module names the kernel file but does not contain it, so the
action keys of the first step and of translate also take the SHA-256 of the
kernel file and of every file it references (const files; for a host
module the placeholders' kernel files and theirs): editing any of them
rebuilds it.  A kernel's interface (inputs, outputs, core count, the file
names it references *as written*) is memoised in the store by the file's
digest, so an unchanged kernel is not parsed again on a no-op rebuild;
where those names lead is decided per file, after the memo.
"""

from __future__ import annotations

import os
import stat
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tusk.ir.errors import INPUT, INTERNAL, InputError, TuskError, UsageError, fault_of
from tusk.ir.klr.magic import is_klr_bytes
from tusk.stages import host as stages_host
from tusk.stages.host import NotAKernel

INTERFACE_VERSION = 5  # bump when the reader refuses more: a memoised interface must not outlive its checks
HOST_VERSION = 1
KERNEL_SUFFIXES = (".klr", ".json")


@dataclass
class Kernel:
    """One kernel file of the input directory."""

    path: Path                       # absolute, symbolic links resolved
    name: str                        # output directory name (unique in the directory, see the docstring)
    entry: str = ""                  # the file's name in the directory
    digest: str = ""                 # SHA-256 of the file
    fmt: str = ""                    # "klr" | "bir" | "host"
    ncores: int = 1
    ins: list[list] = field(default_factory=list)    # [name, bir dtype, shape]
    outs: list[list] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)    # other files it reads (absolute paths)
    placeholders: dict[str, str] = field(default_factory=dict)  # fmt "host": klir_binary -> resolved path
    size: int = 0                    # instructions per core after unrolling (estimate; see stages.host)
    error: str | None = None
    fault: str = ""                  # with error: whose fault (tusk.ir.errors)
    bad_name: bool = False           # its name cannot be a directory: nothing under OUT is touched for it
    traceback: str = ""              # of an internal error
    # a kernel written in Python (tusk.toml [kernels.NAME]): ``origin`` is its .py file, ``path`` the KLR file it
    # was traced into (in its staging directory), ``trace`` how (key, cached or executed: workflows/traced.py)
    origin: Path | None = None
    trace: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> Path:
        """The file the user wrote: the .py of a traced kernel, else the kernel file."""
        return self.origin or self.path

    def fail(self, e: BaseException) -> None:
        """Record that reading this kernel raised ``e``: whose fault is :func:`fault_of`'s for a kernel being
        read, except that a file that cannot be read (OSError) is the kernel's, not the machine's."""
        fault = INPUT if isinstance(e, OSError) else fault_of(e, kernel=True, read=True)
        if isinstance(e, TuskError) and fault != INTERNAL:
            self.error = str(e) if e.file else f"{self.path}: {e}"
        elif isinstance(e, OSError):
            self.error = f"{self.path}: cannot be read ({e.strerror or e})"
        else:
            self.error = f"{self.path}: reading the kernel failed: {type(e).__name__}: {e}"
            self.traceback = traceback.format_exc()
        self.fault = fault


@dataclass
class Skipped:
    path: Path
    reason: str
    kernel: bool = False  # a kernel file left out (another core count, a placeholder), not a file of no kernel


def discover(directory: Path, store=None) -> tuple[list[Kernel], list[Skipped]]:
    """Classify the files of ``directory``; read each kernel's interface (memoised in ``store``)."""
    from tusk.cache.keys import file_digest

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such directory" if not directory.exists() else
                         f"{directory} is not a directory")
    kernels: list[Kernel] = []
    skipped: list[Skipped] = []
    for p in sorted(directory.iterdir()):
        kind = _classify(p)
        if kind.startswith("skip:"):
            skipped.append(Skipped(p, kind[5:]))
            continue
        k = Kernel(path=Path(os.path.abspath(p)) if kind.startswith("error:") else p.resolve(), name=p.stem,
                   entry=p.name)
        if kind.startswith("error:"):
            k.error = str(InputError(kind[6:], file=str(p)))
            kernels.append(k)
            continue
        k.digest = file_digest(k.path)
        reason = read_kernel(k, kind, store)
        if reason is not None:
            skipped.append(Skipped(p, reason, kernel=True))
            continue
        kernels.append(k)
    _name(kernels)
    return kernels, skipped


def read_kernel(k: Kernel, kind: str, store) -> str | None:
    """Fill in kernel ``k``'s interface and references from its file (``k.path``, ``k.digest`` set); a failure
    is recorded on ``k``.  Returns why the file is no kernel after all (to be skipped), else None."""
    try:
        info = _interface(k.path, kind, k.digest, store)
    except Exception as e:  # noqa: BLE001 - whatever one kernel's file does, the others are built
        k.fail(e)
        return None
    if info["fmt"] == "skip":
        return info["reason"]
    k.fmt, k.ncores, k.ins, k.outs = info["fmt"], info["ncores"], info["ins"], info["outs"]
    k.size = int(info.get("size") or 0)
    try:
        k.refs = _refs(k, info, store)
    except Exception as e:  # noqa: BLE001
        k.fail(e)
    return None


def _name(kernels: list[Kernel]) -> None:
    """Stems, except that every kernel whose name is shared takes its whole file name (see the docstring)."""
    names = {id(k): Path(k.entry).stem for k in kernels}
    while True:  # each round moves at least one kernel to its (unique) file name: it ends
        count: dict[str, int] = {}
        for n in names.values():
            count[n] = count.get(n, 0) + 1
        clash = [k for k in kernels if count[names[id(k)]] > 1 and names[id(k)] != k.entry]
        if not clash:
            break
        for k in clash:
            names[id(k)] = k.entry
    for k in kernels:
        k.name = names[id(k)]
        problem = name_problem(k.name)
        if problem:
            k.error, k.fault, k.bad_name = f"{k.path}: {problem}; rename the file", INPUT, True


# a kernel's name is its output directory, and with a ".core<k>.bir.json" suffix a file name: 255 bytes at most
MAX_NAME_BYTES = 200


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a kernel's output directory, or None."""
    if name in ("", ".", "..") or name.strip(".") == "":
        return f"the kernel name {name!r} (from the file name) is not a directory name"
    bad = sorted({c for c in name if c in "/\\\0" or ord(c) < 32})
    if bad:
        return f"the kernel name {name!r} contains {', '.join(repr(c) for c in bad)}"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"the kernel name is {len(name.encode('utf-8', 'surrogateescape'))} bytes long (at most {MAX_NAME_BYTES})"
    return None


def _classify(p: Path) -> str:
    """"klr" | "json" | "skip:<reason>" | "error:<message>" (a kernel file that cannot be read)."""
    kernel_suffix = p.suffix in KERNEL_SUFFIXES
    if p.is_dir():
        return "skip:directory (not searched)"
    if not p.is_file():
        if not kernel_suffix:
            return "skip:not a regular file"
        return "error:cannot be read (a broken symbolic link)" if not p.exists() else \
            "error:cannot be read (not a regular file)"
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as e:
        return f"{'error' if kernel_suffix else 'skip'}:cannot be read ({e.strerror or e})"
    if p.suffix == ".klr" or is_klr_bytes(head):
        return "klr"
    if p.suffix == ".json":
        return "json"
    return "skip:not a kernel file (.klr or BIR-JSON .json)"


def _interface(path: Path, kind: str, digest: str, store) -> dict[str, Any]:
    """What a build needs of a kernel file, memoised by its digest; failures raise (and are not memoised).

    ``refs`` are the names the file uses (const files, placeholder kernel
    files), relative ones unresolved: the same bytes in another directory
    reference other files.
    """
    from tusk.cache.keys import digest as key_digest

    memo_key = key_digest({"interface": INTERFACE_VERSION, "file": digest, "kind": kind})
    memo = store.get_note("kernel-interface", memo_key) if store is not None else None
    if isinstance(memo, dict) and memo.get("v") == INTERFACE_VERSION:
        return memo
    try:
        info = stages_host.read_interface(path, kind)
    except NotAKernel as e:
        info = {"fmt": "skip", "reason": str(e)}
    info["v"] = INTERFACE_VERSION
    if store is not None and digest != "missing":
        store.put_note("kernel-interface", memo_key, info)
    return info


def _refs(k: Kernel, info: dict[str, Any], store) -> list[str]:
    """Absolute paths of every file kernel ``k``'s build reads besides itself."""
    from tusk.cache.keys import file_digest

    if k.fmt != "host":
        return sorted({_checked_const(r, k.path) for r in info["refs"]})
    refs: set[str] = set()
    art = info.get("art") or ""
    if art and not os.path.isabs(art):
        art = str(k.path.parent / art)
    for written in info["refs"]:
        found = _placeholder_file(written, k.path, art)
        if found is None:
            raise InputError(f"a kernel placeholder names kernel file {written}, which does not exist (looked "
                             f"next to the module{' and in its artifact directory ' + art if art else ''})",
                             file=str(k.path))
        k.placeholders[written] = found
        refs.add(found)
        try:  # the placeholder kernel's own const files are inputs of this build too
            inner = _interface(Path(found), "klr" if _is_klr_file(found) else "json", file_digest(found), store)
        except TuskError:
            continue  # translate reports it, naming the file
        refs.update(_checked_const(r, Path(found)) for r in inner.get("refs", ()) if inner.get("fmt") in ("klr", "bir"))
    return sorted(refs)


MAX_CONST_BYTES = 1 << 36  # 64 GiB: past any device's HBM; a larger "const file" is a mistake or an attack


def _checked_const(written: str, kernel_path: Path) -> str:
    """The path of a const file kernel ``kernel_path`` names, checked before any byte of it is read (its
    digest is part of the build's keys, so it is read before the cache is asked, let alone translate runs):

    * a name written relative that resolves outside the kernel file's directory (``..``, a symbolic link
      out) is refused here, as translate refuses it -- a cache hit must not skip that rule;
    * a device, FIFO or directory (``/dev/zero`` never ends) and a file past MAX_CONST_BYTES are refused.

    A missing file stays a name (its digest is "missing"; translate reports it).
    """
    path = _beside(written, kernel_path)
    if not os.path.isabs(written):
        base = os.path.realpath(kernel_path.parent)
        real = os.path.realpath(path)
        if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
            raise InputError(f"refusing const file {written!r}: {path} resolves outside the kernel file's "
                             f"directory {kernel_path.parent}", file=str(kernel_path))
    try:
        st = os.stat(path)
    except OSError:
        return path
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"refusing const file {written!r}: {path} is not a regular file (a device, FIFO or "
                         "directory)", file=str(kernel_path))
    if st.st_size > MAX_CONST_BYTES:
        raise InputError(f"refusing const file {written!r}: {path} is {st.st_size} bytes (at most "
                         f"{MAX_CONST_BYTES})", file=str(kernel_path))
    return path


def _placeholder_file(written: str, module_path: Path, art: str) -> str | None:
    """The backend's rule with "as written" meaning next to the module file: path, else art/basename."""
    first = _beside(written, module_path)
    if os.path.isfile(first):
        return first
    base = os.path.basename(written.rstrip("/\\"))
    if art and base not in ("", ".", ".."):
        second = os.path.join(art, base)
        if os.path.isfile(second):
            return os.path.abspath(second)
    return None


def _is_klr_file(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return path.endswith(".klr") or is_klr_bytes(fh.read(4))
    except OSError:
        return path.endswith(".klr")


def _beside(name: str, kernel_path: Path) -> str:
    """A file a kernel names: absolute as is, relative to the kernel file's directory otherwise."""
    return os.path.normpath(name if os.path.isabs(name) else os.path.join(kernel_path.parent, name))


def kernel_dir(k: Kernel) -> str:
    """The directory kernel ``k``'s file is in: what its file names are relative to."""
    return str(k.path.parent)


def relative_name(path: str, directory: str) -> str:
    """``path`` as keys and stored modules name it: relative to ``directory`` when inside it, else as is.

    Locations are not content: the same kernels in another checkout must
    give the same keys.
    """
    rel = os.path.relpath(path, directory)
    return path if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel) else rel


def file_digests(k: Kernel) -> dict[str, str]:
    """Digests of every file kernel ``k``'s build reads, by name relative to its directory: the
    ``files`` part of the keys that need it."""
    from tusk.cache.keys import file_digest

    kdir = kernel_dir(k)
    files = {relative_name(str(k.path), kdir): k.digest}
    for r in k.refs:
        files[relative_name(r, kdir)] = file_digest(r)
    return files


def host_module(k: Kernel, core: int, *, arch: str = "gen3", instruction_limit: int | None = None):
    """The host module for kernel ``k`` on logical core ``core`` (see :mod:`tusk.stages.host`).

    As stored, it has no artifact directory and names the kernel file by
    its name in its directory; the build binds both when translate runs.
    """
    interface = {"fmt": k.fmt, "ins": k.ins, "outs": k.outs}
    return stages_host.host_module(k.path.name, interface, core, "", name=k.name, arch=arch,
                                   instruction_limit=instruction_limit)


def given_host_module(k: Kernel):
    """Kernel ``k`` (fmt "host") as the build takes it: no artifact directory, placeholder paths resolved.

    The module's own artifact directory would have passes write outside
    OUT, and a relative ``klir_binary`` would be looked up in whatever the
    current directory is; both are fixed here (see the module docstring):
    each placeholder names the file it was resolved to, relative to the
    module's directory (the build binds it when translate runs).
    """
    from tusk.ir import bir_json

    module = bir_json.load(k.path)
    kdir = kernel_dir(k)
    for fn, i in stages_host.placeholders(module):
        attrs = fn.record(fn.insts.get("attrs", i))
        written = stages_host.kernel_file(attrs)
        if written is not None and written in k.placeholders:
            fn.insts.set("attrs", i, fn.intern_record(stages_host.naming_kernel_file(
                attrs, relative_name(k.placeholders[written], kdir))))
    module.artifact_dir = ""
    return module


def output_name(k: Kernel, core: int | None) -> str:
    """File name of the final BIR-JSON of kernel ``k`` on ``core``."""
    if core is None or k.ncores <= 1:
        return f"{k.name}.bir.json"
    return f"{k.name}.core{core}.bir.json"


def artifact_dir(out: Path, k: Kernel) -> str:
    return os.path.abspath(os.fspath(Path(out) / k.name))
