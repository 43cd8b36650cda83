"""Which aten operators ran on oxide natively, and which through the CPU fallback.

Command line::

    python -m torch_oxide.coverage [--json PATH] SCRIPT [args...]
    python -m torch_oxide.coverage [--json PATH] -m MODULE [args...]   # e.g. -m pytest -q tests/python

runs the script (or module) as ``__main__`` with ``sys.argv`` set as Python would,
then prints every aten operator that ran with oxide tensors, in two sections (native,
CPU fallback) with call counts, and the totals. ``--json PATH`` also writes the same
data as JSON. The exit status is the program's own. Unless ``OXIDE_FALLBACK`` is set
in the environment, the run uses fallback mode ``silent`` (the report replaces the
per-operator warnings); the mode in force before is restored afterwards.

Python API::

    with torch_oxide.coverage.record() as cov:
        model(x)
    cov.native          # {"aten::fill_.Scalar": 3, ...}  operator -> calls
    cov.fallback        # {"aten::addmm": 2, ...}
    cov.fallback_via    # {"aten::addmm": {"aten::addmm.out": 2}}  the operators that fell back
    print(cov.report())

``record()`` leaves the fallback mode alone.

What it measures. A ``TorchDispatchMode`` sees each operator call at the Python
dispatch key, below autograd and above the backend. A call is *on oxide* when a tensor
among its arguments (lists included) is on an oxide device, or when it is a factory
asked for an oxide device (``device=`` argument). Such a call is *fallback* when
``torch.oxide.fallback_stats()`` grew while it ran, i.e. when the operator or any
operator it called underneath went through the CPU fallback; the operators whose
counters grew are kept in ``fallback_via`` (``aten::exp`` falls back as
``aten::exp.out``). Otherwise it is *native*. Operator names are ``aten::name`` plus
``.overload`` unless the overload is the default one, as ``fallback_stats()`` spells them.

Limits:

- Operators that decompose above the Python dispatch key (CompositeImplicitAutograd,
  e.g. ``torch.nn.functional.linear``, ``softmax``, ``einsum``) appear as their
  decomposition (``aten::addmm``, ``aten::_softmax``, ...), never under their own name.
- Counts only, never times: the dispatch mode adds Python work to every operator call,
  so time measured under it would measure this tool. Use ``benchmarks/ops.py`` for speed.
- The mode is per thread: operators run by threads that did not enter it (other than
  the autograd engine's, which inherits it) are not seen, and child processes
  (DataLoader workers, ``pytest -n``) are not covered. The fallback counters are
  process-wide, so another thread falling back during a call makes that call look
  like a fallback.
- Under ``OXIDE_FALLBACK=error`` a refused call raises; it still counts as fallback,
  since that is what it would have done. A call that raised for any other reason is
  not counted.
- A dispatch mode changes how some code runs: ``torch.compile`` and code that checks
  for active modes may behave differently while recording.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import oxide

__all__ = ["Coverage", "record", "main"]

# The PrivateUse1 key before and after torch_oxide renames it.
_DEVICE_TYPES = frozenset({"oxide", "privateuseone"})


def _on_oxide(obj: Any) -> bool:
    """True when ``obj`` holds an oxide tensor or an oxide ``torch.device`` (nested in lists/tuples/dicts)."""
    if isinstance(obj, torch.Tensor):
        return obj.device.type in _DEVICE_TYPES
    if isinstance(obj, torch.device):
        return obj.type in _DEVICE_TYPES
    if isinstance(obj, (list, tuple)):
        return any(_on_oxide(o) for o in obj)
    if isinstance(obj, dict):
        return any(_on_oxide(o) for o in obj.values())
    return False


def _op_name(func: Any) -> str:
    """``aten::add.Tensor``, ``aten::exp`` (default overload), as fallback_stats() names them."""
    schema = getattr(func, "_schema", None)
    if schema is None:  # a higher-order operator has no schema
        return str(func)
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _grown(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The fallback counters that increased from ``before`` to ``after``, with the increase."""
    return {op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _by_calls(counts: dict[str, int]) -> list[tuple]:
    """Most calls first, then by name."""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


class Coverage:
    """Operator calls on oxide, split into native and CPU fallback (see the module docstring).

    ``native`` and ``fallback`` map operator name -> calls; an operator that ran both
    ways (e.g. ``copy_`` for some dtype pairs only) is in both. ``fallback_via`` maps a
    fallback operator to the fallback counters that grew under it and by how much.
    """

    def __init__(self) -> None:
        self.native: dict[str, int] = {}
        self.fallback: dict[str, int] = {}
        self.fallback_via: dict[str, dict[str, int]] = {}
        # The autograd engine may run backward operators on its own thread.
        self._lock = threading.Lock()

    def _add(self, op: str, grown: dict[str, int]) -> None:
        with self._lock:
            if not grown:
                self.native[op] = self.native.get(op, 0) + 1
                return
            self.fallback[op] = self.fallback.get(op, 0) + 1
            via = self.fallback_via.setdefault(op, {})
            for inner, n in grown.items():
                via[inner] = via.get(inner, 0) + n

    def totals(self) -> dict[str, int]:
        """Distinct operators and calls, native and fallback."""
        return {
            "operators_native": len(self.native),
            "operators_fallback": len(self.fallback),
            "calls_native": sum(self.native.values()),
            "calls_fallback": sum(self.fallback.values()),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: totals, ``native`` {op: calls}, ``fallback`` {op: {calls, via}}, sorted by calls."""
        return {
            "totals": self.totals(),
            "native": dict(_by_calls(self.native)),
            "fallback": {
                op: {"calls": n, "via": dict(_by_calls(self.fallback_via.get(op, {})))}
                for op, n in _by_calls(self.fallback)
            },
        }

    def report(self) -> str:
        """The two sections (native, CPU fallback), most-called first, then the totals."""
        t = self.totals()
        width = max([len(op) for op in (*self.native, *self.fallback)] + [len("operator")])
        lines = ["oxide operator coverage: aten operators that ran with oxide tensors", ""]
        lines.append(f"Native ({_count(t['operators_native'], 'operator')}, {_count(t['calls_native'], 'call')})")
        if self.native:
            lines.append(f"  {'calls':>8}  operator")
            lines += [f"  {n:>8}  {op}" for op, n in _by_calls(self.native)]
        else:
            lines.append("  (none)")
        lines.append("")
        lines.append(
            f"CPU fallback ({_count(t['operators_fallback'], 'operator')}, {_count(t['calls_fallback'], 'call')})"
        )
        if self.fallback:
            lines.append(f"  {'calls':>8}  {'operator':<{width}}  fell back as")
            for op, n in _by_calls(self.fallback):
                via = ", ".join(inner for inner, _ in _by_calls(self.fallback_via.get(op, {})))
                lines.append(f"  {n:>8}  {op:<{width}}  {via}")
        else:
            lines.append("  (none)")
        lines.append("")
        lines.append(
            f"Totals: operators native {t['operators_native']} / fallback {t['operators_fallback']}, "
            f"calls native {t['calls_native']} / fallback {t['calls_fallback']}"
        )
        return "\n".join(lines)


class _CoverageMode(TorchDispatchMode):
    """Classifies each oxide operator call by whether the fallback counters grew during it."""

    def __init__(self, coverage: Coverage) -> None:
        super().__init__()
        self.coverage = coverage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # CPU-only calls pass straight through: they cannot use the oxide fallback.
        if not (_on_oxide(args) or _on_oxide(kwargs)):
            return func(*args, **kwargs)
        op = _op_name(func)
        before = oxide.fallback_stats()
        try:
            out = func(*args, **kwargs)
        except BaseException:
            # Refused by OXIDE_FALLBACK=error: the counter grew before it raised.
            grown = _grown(before, oxide.fallback_stats())
            if grown:
                self.coverage._add(op, grown)
            raise
        self.coverage._add(op, _grown(before, oxide.fallback_stats()))
        return out


@contextlib.contextmanager
def record() -> Iterator[Coverage]:
    """Record the oxide operator calls made inside the ``with`` block; yields the :class:`Coverage`."""
    coverage = Coverage()
    with _CoverageMode(coverage):
        yield coverage


_USAGE = """\
usage: python -m torch_oxide.coverage [--json PATH] SCRIPT [args...]
       python -m torch_oxide.coverage [--json PATH] -m MODULE [args...]

Run a Python script or module and list the aten operators that ran on oxide,
native or through the CPU fallback, with call counts and totals."""


def _parse(argv: list[str]) -> tuple:
    """(json_path, module or None, script or None, program args); exits with the usage on bad input."""
    json_path: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(_USAGE)
            sys.exit(0)
        elif arg == "--json" and i + 1 < len(argv):
            json_path, i = argv[i + 1], i + 2
        elif arg.startswith("--json="):
            json_path, i = arg[len("--json=") :], i + 1
        elif arg == "-m" and i + 1 < len(argv):
            return json_path, argv[i + 1], None, argv[i + 2 :]
        elif arg.startswith("-"):
            break  # unknown option, or an option missing its value
        else:
            return json_path, None, arg, argv[i + 1 :]
    print(_USAGE, file=sys.stderr)
    sys.exit(2)


def _run_program(module: str | None, script: str | None, args: list[str]) -> None:
    """Run the module or script as ``__main__``, with sys.argv and sys.path[0] set as ``python`` would."""
    import runpy

    if module is not None:
        sys.argv = [module, *args]  # run_module replaces argv[0] with the module's file
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


def main(argv: list[str] | None = None) -> None:
    """The ``python -m torch_oxide.coverage`` entry point; exits with the program's status."""
    json_path, module, script, args = _parse(sys.argv[1:] if argv is None else argv)
    command = (["-m", module] if module is not None else [script]) + args

    previous_mode = oxide.get_fallback_mode()
    if "OXIDE_FALLBACK" not in os.environ:
        oxide.set_fallback_mode("silent")
    run_mode = oxide.get_fallback_mode()

    coverage = Coverage()
    status: Any = 0
    try:
        with _CoverageMode(coverage):
            _run_program(module, script, args)
    except SystemExit as e:
        status = e.code
    except BaseException:  # report what ran before the failure, then exit as Python would
        traceback.print_exc()
        status = 1
    finally:
        oxide.set_fallback_mode(previous_mode)

    sys.stdout.flush()
    print()
    print(coverage.report())
    if json_path:
        data = {
            "tool": "torch_oxide.coverage",
            "command": command,
            "exit_status": status if isinstance(status, int) or status is None else str(status),
            "fallback_mode": run_mode,
            "torch_version": torch.__version__,
            **coverage.to_dict(),
        }
        directory = os.path.dirname(os.path.abspath(json_path))
        os.makedirs(directory, exist_ok=True)
        with open(json_path, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        print(f"wrote {json_path}")
    sys.exit(status)


if __name__ == "__main__":
    main()
