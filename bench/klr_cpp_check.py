"""Do KLR's own C++ reader and Tusk read the same values from KLR files?

    python bench/klr_cpp_check.py --klr KLR_CHECKOUT [FILE.klr | DIR ...]

Builds a small driver against KLR's C++ deserializer and pretty printer
(``interop/klr`` of a KLR checkout at the commit Tusk reads and writes,
``tusk.ir.klr.kernel.KLR_COMMIT``) with ``gcc``/``g++`` in a temporary
directory, then, for every file: the C++ reader must read the header, the
metadata and the contents with no exception and no byte left over, and its
printout (``klr::to_string``) must equal Tusk's ``pretty`` of Tusk's reading,
character for character.  The printer loses some information (brackets,
float digits: tests/data/klr/README.md), so this checks the encoding and the
decoded structure, not every bit of every float.

Default files: the fixtures (tests/data/klr/0*.klr).  To check what the tracer
writes, trace kernels first, for example every public kernel of the public
bench: ``python bench/bench_public_nki.py --repos DIR --work W`` leaves
``W/NAME.klr`` for each traced entry; then pass ``W``.

A byte-for-byte round trip through the C++ writer is not the test: the C++
writer emits bytes for zero-width Prop fields that KLR's Lean reader (and
Tusk, which follows it) refuse (fixture neg_cpp_writer_prop_bytes).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRIVER = r"""
#include <cstdio>
#include <iostream>
#include "klir_ast.hpp"
#include "klir_pretty_print.hpp"
#include "klir_serde.hpp"
using namespace klr;
// argv[1]: a KLR file. Prints the four lines of tests/data/klr/*.expected.txt; exit 1 on an exception,
// 3 when bytes are left after the contents.
int main(int argc, char **argv) {
  FILE *in = std::fopen(argv[1], "rb");
  if (!in) { std::perror(argv[1]); return 2; }
  try {
    Ptr<KLRFile> file = KLRFile_des(in);
    std::cout << to_string(*file) << "\n";
    Ptr<KLRMetaData> meta = KLRMetaData_des(in);
    std::cout << to_string(*meta) << "\n";
    Ptr<Contents> contents = Contents_des(in);
    std::cout << "Contents C++ tag " << static_cast<unsigned>(contents->tag) << "\n";
    std::cout << to_string(*contents) << "\n";
    long at = std::ftell(in);
    std::fseek(in, 0, SEEK_END);
    if (std::ftell(in) != at) { std::cerr << (std::ftell(in) - at) << " bytes after the contents\n"; return 3; }
  } catch (std::exception &e) { std::cerr << e.what() << "\n"; return 1; }
  return 0;
}
"""


def build(klr: Path, work: Path) -> Path:
    src = klr / "interop" / "klr"
    if not (src / "klir_serde.cpp").exists():
        raise SystemExit(f"{klr}: no interop/klr/klir_serde.cpp (give a checkout of leanprover/KLR)")
    (work / "driver.cpp").write_text(DRIVER)
    inc = f"-I{src}"
    for c in ("region.c", "cbor.c"):
        subprocess.run(["gcc", "-std=c17", "-O1", "-w", inc, "-c", str(src / c), "-o", str(work / f"{c}.o")],
                       check=True)
    exe = work / "klr_print"
    subprocess.run(["g++", "--std=c++17", "-O1", "-w", inc, str(work / "driver.cpp"),
                    *(str(src / f) for f in ("klir_serde.cpp", "klir_common.cpp", "klir_pretty_print.cpp")),
                    str(work / "region.c.o"), str(work / "cbor.c.o"), "-o", str(exe)], check=True)
    return exe


def klr_files(args: list[str]) -> list[Path]:
    if not args:
        return sorted((ROOT / "tests" / "data" / "klr").glob("0*.klr"))
    out: list[Path] = []
    for a in map(Path, args):
        out += sorted(a.glob("*.klr")) if a.is_dir() else [a]
    return out


def first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--klr", type=Path, required=True, help="a checkout of leanprover/KLR")
    ap.add_argument("files", nargs="*", help="KLR files or directories of them (default: the fixtures)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tusk.ir.klr import pretty, read_klr
    from tusk.ir.klr.kernel import KLR_COMMIT

    head = subprocess.run(["git", "-C", str(args.klr), "rev-parse", "--short=7", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    if head and not KLR_COMMIT.startswith(head) and not head.startswith(KLR_COMMIT[:7]):
        print(f"note: {args.klr} is at {head}; Tusk reads and writes the format of KLR {KLR_COMMIT}")
    files = klr_files(args.files)
    same, problems = 0, []
    with tempfile.TemporaryDirectory(prefix="tusk-klr-cpp-") as tmp:
        exe = build(args.klr, Path(tmp))
        for f in files:
            run = subprocess.run([str(exe), str(f)], capture_output=True, text=True, check=False)
            if run.returncode != 0:
                problems.append(f"{f}: KLR's C++ reader fails (exit {run.returncode}): {run.stderr.strip()[:300]}")
                continue
            ours = pretty(read_klr(f.read_bytes()))
            if ours != run.stdout:
                k = first_difference(ours, run.stdout)
                problems.append(f"{f}: the printouts differ at character {k}:\n  Tusk: {ours[max(0, k - 120):k + 80]}"
                                f"\n  C++:  {run.stdout[max(0, k - 120):k + 80]}")
                continue
            same += 1
    for p in problems:
        print(p)
    print(f"{same} of {len(files)} files read alike by KLR's C++ reader and Tusk")
    raise SystemExit(1 if problems or not files else 0)


if __name__ == "__main__":
    main()
