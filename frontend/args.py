"""Kernel arguments that are not tensors, as authors pass them: ``--arg shape2D=32,16 --arg eps=1e-6``.

A value is read like a Python literal (``ast.literal_eval``: ints, floats,
tuples, lists, strings, None) and never executed; ``true``/``false`` are
bools and a dtype name (``bf16``, ``float32``, ``nl.bfloat16``) is that NKI
dtype.  ``np.NAME``, ``nl.NAME`` and ``nisa.NAME`` paths name those values
(``op0=nl.add``) and ``inf``/``-inf``/``nan`` are floats
(:mod:`tusk.frontend.arg_names`).  Any other bare word is a string
(``mode=fast``).  A call of a name of the kernel's module with such values
(``kargs=KernelArgs(eps=1e-6)``, ``mode=Mode.FAST`` as an argument of it) is a
:class:`ModuleValue`: made from the kernel module's names when the kernel is
bound, as the author's own caller would make it.  :func:`bind` puts the
arguments on the kernel's parameters by name; the tensor inputs fill the
parameters left, in order.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tusk.frontend.specs import DTYPES
from tusk.frontend.tensors import Dtype
from tusk.ir.errors import UsageError

_BOOLS = {"true": True, "false": False}


def parse_value(text: str) -> Any:
    """The value of ``--arg NAME=TEXT``."""
    s = str(text).strip()
    if s.lower() in _BOOLS:
        return _BOOLS[s.lower()]
    dtype = dtype_named(s)
    if dtype is not None:
        return dtype
    from tusk.frontend.arg_names import lookup
    found, value = lookup(s)  # np.add, nl.max, nisa.reduce_cmd.load_reduce, -inf
    if found:
        return value
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    module_value = ModuleValue.parse(s)
    if module_value is not None:
        return module_value
    if s[:1] in _LITERAL_STARTS:
        # a number, a tuple or a quoted string with a slip in it (`(32,`, `1e-6x`): not taken as a bare word
        raise ValueError(f"{s!r} is not a Python literal (a number, a tuple such as 32,16, True/False, a dtype "
                         f"or an nl./np. name; quote a string: '\"{s}\"')")
    return s  # else a bare word: the string itself


_LITERAL_STARTS = frozenset("0123456789+-.([{'\"")


@dataclass(frozen=True)
class ModuleValue:
    """``Name(arg, key=arg)`` or ``Name.attr`` of the kernel's module, its arguments literals or such values:
    made when the kernel is bound (:meth:`make`), from the names of the kernel function's module."""

    text: str                      # canonical spelling (ast.unparse)
    tree: Any = None               # the parsed expression

    @staticmethod
    def parse(text: str) -> ModuleValue | None:
        try:
            tree = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
        if isinstance(tree, ast.Call) and _is_path(tree.func) and all(_is_value(a) for a in tree.args) and \
                all(k.arg is not None and _is_value(k.value) for k in tree.keywords):
            return ModuleValue(ast.unparse(tree), tree)
        return None

    def make(self, namespace: Mapping[str, Any]) -> Any:
        return _evaluate(self.tree, namespace)


def _is_path(node: Any) -> bool:
    """``Name`` or ``Name.attr.attr``."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_value(node: Any) -> bool:
    if isinstance(node, ast.Call):
        return _is_path(node.func) and all(_is_value(a) for a in node.args) and \
            all(k.arg is not None and _is_value(k.value) for k in node.keywords)
    if _is_path(node):
        return True
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _evaluate(node: Any, namespace: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Call):
        fn = _evaluate(node.func, namespace)
        return fn(*(_evaluate(a, namespace) for a in node.args),
                  **{k.arg: _evaluate(k.value, namespace) for k in node.keywords if k.arg is not None})
    if isinstance(node, ast.Attribute):
        return getattr(_evaluate(node.value, namespace), node.attr)
    if isinstance(node, ast.Name):
        if node.id not in namespace:
            raise NameError(f"{node.id} is not a name of the kernel's module")
        return namespace[node.id]
    return ast.literal_eval(node)


def dtype_named(text: str) -> Dtype | None:
    name = text.strip()
    for prefix in ("nl.", "np.", "numpy.", "nki.language."):
        name = name.removeprefix(prefix)
    key = DTYPES.get(name.lower())
    return Dtype(key) if key else None


def parse_arg(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` -> (NAME, value); a UsageError says what is wrong."""
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise UsageError(f"--arg {text!r}: expected NAME=VALUE, e.g. --arg eps=1e-6 or --arg shape2D=32,16")
    if not value.strip():
        raise UsageError(f"--arg {text!r}: no value after '='")
    try:
        return name, parse_value(value)
    except ValueError as e:
        raise UsageError(f"--arg {text!r}: {e}") from None


def parse_args(texts: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for text in texts:
        name, value = parse_arg(text)
        if name in out:
            raise UsageError(f"--arg {name} is given twice")
        out[name] = value
    return out


def from_toml(value: Any) -> Any:
    """A tusk.toml ``args`` value: arrays are tuples, strings are read as ``--arg`` text."""
    if isinstance(value, list):
        return tuple(from_toml(v) for v in value)
    if isinstance(value, str):
        return parse_value(value)
    if isinstance(value, (bool, int, float)):
        return value
    raise ValueError(f"{value!r} is not a number, a bool, a string or an array of them")


def arg_text(value: Any) -> str:
    """A stable spelling of an argument value (the trace key and messages)."""
    if isinstance(value, Dtype):
        return f"nl.{value!s}"
    if isinstance(value, ModuleValue):
        return value.text
    if callable(value) and hasattr(value, "__name__"):  # np.add, nl.max: no object address in the key
        return f"{getattr(value, '__module__', None) or 'numpy'}.{value.__name__}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(arg_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


def _made(fn: Callable[..., Any], name: str, value: Any, where: str) -> Any:
    """A :class:`ModuleValue` made from the kernel module's names (a failure names the argument)."""
    from tusk.frontend.errors import TraceError

    if not isinstance(value, ModuleValue):
        return value
    try:
        return value.make(fn.__globals__)
    except Exception as e:  # noqa: BLE001 - the author's class raised: report it as the argument's error
        raise TraceError(f"{where}: argument {name}={value.text}: {type(e).__name__}: {e}") from None


@dataclass
class Binding:
    """How the kernel is called: positional and keyword values, and which parameters are tensors."""

    positional: list[Any]
    keywords: dict[str, Any]
    tensor_params: list[str]   # parameter names the tensor inputs go to, in the inputs' order


TENSOR = object()  # placeholder for a tensor input in a Binding until the tracer makes the tensor


def bind(fn: Callable[..., Any], n_tensors: int, args: Mapping[str, Any], where: str) -> Binding:
    """Bind ``args`` by parameter name, then ``n_tensors`` tensors to the parameters left (those without a
    default first), in signature order; defaults for the rest.  A TraceError names an unknown or missing
    parameter."""
    from tusk.frontend.errors import TraceError

    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    takes_any = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    names = [p.name for p in params]
    listing = f"its parameters: {', '.join(names) or 'none'}"
    for name in args:
        if name not in names and not takes_any:
            raise TraceError(f"{where}: argument {name}: kernel {fn.__name__} has no parameter {name!r} "
                             f"({listing})")
    free = [p for p in params if p.name not in args]
    required = [p for p in free if p.default is p.empty]
    optional = [p for p in free if p.default is not p.empty]
    if n_tensors < len(required):
        missing = [p.name for p in required[n_tensors:]]
        raise TraceError(f"{where}: kernel {fn.__name__}: no value for parameter{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (give a tensor with --input, or a value with --arg NAME=VALUE; "
                         f"{listing})")
    if n_tensors > len(free):
        raise TraceError(f"{where}: kernel {fn.__name__} takes {len(free)} tensor argument(s) besides the --arg "
                         f"values ({', '.join(p.name for p in free) or 'none'}); {n_tensors} --input given")
    chosen = {p.name for p in required} | {p.name for p in optional[:n_tensors - len(required)]}
    tensor_params = [p.name for p in params if p.name in chosen]
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    args = {name: _made(fn, name, value, where) for name, value in args.items()}
    for p in params:
        value = TENSOR if p.name in chosen else args.get(p.name, p.default)
        if p.kind == p.POSITIONAL_ONLY:
            positional.append(value)
        else:
            keywords[p.name] = value
    for name, value in args.items():
        if name not in names:
            keywords[name] = value
    return Binding(positional, keywords, tensor_params)
