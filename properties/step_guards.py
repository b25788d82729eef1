"""Which step checks can fire on a step, read from each check's opening guard: the exhaustive search asks
only those.

Most action properties (``spec.invariants.ACTION_PROPERTIES``) and sometimes-conditions
(``properties.exhaustive.SOMETIMES``) open with a guard that returns at once for every action but a few,
or for every model of a kind: ``if not isinstance(a, SendPull): return None``, ``if not m.orderly or not
isinstance(a, PersistOffsets): return None``. Calling them on every transition costs a Python call each,
about a fifth of the search's time. :class:`StepChecks` reads the guard from the function's own source
once and, per model and action type, keeps only the checks whose guard does not certainly return.

**Soundness.** A check is skipped only when its first statement is ``if <test>: return <constant>`` (with
nothing else in that ``if``) and ``<test>`` is certainly true for every action of the type on that model.
The test is evaluated three-valued: ``isinstance(a, X)`` on the action's type, ``m.<attribute>`` on the
model, ``not``, ``and`` and ``or`` of those; anything else (a read of the state, a comparison) is unknown,
and an unknown test never skips. So a skipped check would have returned its constant, which is "holds"
(``None``) for a property and "not reached" (``False``) for a sometimes-condition. A check without such a
guard, or whose source cannot be read, is asked on every step. ``tests/test_check.py`` shows that the
skipping changes no verdict on campaign walks and that a guard reading the state is not trusted.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from rmqspec.spec.actions import Action
from rmqspec.spec.model import Model

T = TypeVar("T")


class _Guard:
    """The opening guard of one check function, if it has one the evaluator can read."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.test: ast.expr | None = None
        self.model_arg = self.action_arg = ""
        self.globals: dict[str, Any] = getattr(fn, "__globals__", {})
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            return
        node = tree.body[0] if tree.body else None
        if not isinstance(node, ast.FunctionDef) or len(node.args.args) < 3:
            return
        names = [a.arg for a in node.args.args]
        self.model_arg, self.action_arg = names[0], names[2]
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        first = body[0] if body else None
        if (
            isinstance(first, ast.If)
            and not first.orelse
            and len(first.body) == 1
            and isinstance(first.body[0], ast.Return)
            and (first.body[0].value is None or isinstance(first.body[0].value, ast.Constant))
        ):
            self.test = first.test

    def certainly_returns(self, model: Model, action_type: type) -> bool:
        """Whether the guard returns at once for every action of ``action_type`` on ``model``."""
        return self.test is not None and self._value(self.test, model, action_type) is True

    def _value(self, e: ast.expr, model: Model, action_type: type) -> bool | None:
        """``e``'s truth for every action of the type on the model: True, False, or None (unknown)."""
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            v = self._value(e.operand, model, action_type)
            return None if v is None else not v
        if isinstance(e, ast.BoolOp):
            values = [self._value(x, model, action_type) for x in e.values]
            if isinstance(e.op, ast.Or):
                return True if True in values else (False if all(v is False for v in values) else None)
            return False if False in values else (True if all(v is True for v in values) else None)
        if (
            isinstance(e, ast.Call)
            and isinstance(e.func, ast.Name)
            and e.func.id == "isinstance"
            and len(e.args) == 2
            and isinstance(e.args[0], ast.Name)
            and e.args[0].id == self.action_arg
        ):
            try:
                kinds = eval(compile(ast.Expression(e.args[1]), "<guard>", "eval"), self.globals)
                return issubclass(action_type, kinds)
            except Exception:  # an unreadable guard is unknown, never a skip
                return None
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == self.model_arg:
            value = getattr(model, e.attr, None)
            return None if value is None else bool(value)
        return None


class StepChecks(Generic[T]):
    """The checks of ``items`` (each with its check function ``fn(item)``) that a step of a given action
    type on ``model`` must ask, in their order (module docstring)."""

    def __init__(self, model: Model, items: Sequence[T], fn: Callable[[T], Callable[..., Any]]) -> None:
        self.model = model
        self.items = tuple(items)
        self.guards = [_Guard(fn(x)) for x in self.items]
        self._by_type: dict[type, tuple[T, ...]] = {}

    def for_action(self, action: Action) -> tuple[T, ...]:
        kind = type(action)
        out = self._by_type.get(kind)
        if out is None:
            out = self._by_type[kind] = tuple(
                x for x, g in zip(self.items, self.guards, strict=True) if not g.certainly_returns(self.model, kind)
            )
        return out

    def skipped(self) -> dict[str, list[int]]:
        """Per action type seen so far, the indices of the checks skipped (for reports and tests)."""
        return {k.__name__: [i for i, x in enumerate(self.items) if x not in kept] for k, kept in self._by_type.items()}
