"""Which modules write each part of ``ConversationState``, read from their code (AST).

A part is a field of ``ConversationState`` whose type is a pydantic model (``transcript``,
``counters``, ``dedup``...) or a list (``pending``, ``queued_messages``...). A write is an
attribute or item assignment, an augmented assignment or a ``del`` whose target is in
that part, or a call of a method that changes it in place (``append``, ``extend``,
``pop``, ``clear``, ``remove``, ``insert``, the windows' own ``drop_oldest``,
``keep_latest``, ``keep_latest_archived``, a dict's ``update``, ``setdefault``,
``popitem``).

The part is found through what names the state: a parameter annotated
``ConversationState``, ``self._state``, a local made from either, or a
``ConversationState(...)``; through a parameter annotated with a part's own model
(``TranscriptWindow``, ``Counters``...); and through aliases of these (``transcript =
state.transcript``, ``self._window = window``). Binding an alias is not a write. A
change to an element taken out of a list (``for call in state.pending: call.x = 1``) is
not seen.
"""

from __future__ import annotations

import ast
import typing
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

from parley.contracts import ConversationState

MUTATORS = {
    *("append", "extend", "pop", "clear", "remove", "insert"),
    *("drop_oldest", "keep_latest", "keep_latest_archived", "update", "setdefault", "popitem"),
}
#: The whole state (not one of its parts), and a ``View`` (``view.state`` is the state),
#: in the alias tables below.
STATE, VIEW = "", "view"


def parts() -> dict[str, str]:
    """Each part's field name, and its model's class name ('' for a list)."""
    found: dict[str, str] = {}
    hints = typing.get_type_hints(ConversationState)
    for name in ConversationState.model_fields:
        hint = hints[name]
        if typing.get_origin(hint) is list:
            found[name] = ""
            continue
        kinds = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if len(kinds) == 1 and isinstance(kinds[0], type) and issubclass(kinds[0], BaseModel):
            found[name] = kinds[0].__name__
    return found


class _Writes(ast.NodeVisitor):
    def __init__(self, fields: dict[str, str]) -> None:
        self.fields = fields
        self.by_type = {model: field for field, model in fields.items() if model}
        self.found: list[tuple[str, int]] = []
        self.attrs: dict[str, str] = {}  # self.<attr> -> part (or STATE)
        self.scopes: list[dict[str, str]] = [{}]

    def part_of(self, node: ast.AST) -> str | None:
        """The part ``node`` is in (STATE: the state itself), or None."""
        names: list[str] = []
        while isinstance(node, ast.Attribute | ast.Subscript):
            if isinstance(node, ast.Attribute):
                names.insert(0, node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if node.id == "self" and names:
            head = names.pop(0)
            root = STATE if head == "_state" else self.attrs.get(head)
        else:
            root = self.scopes[-1].get(node.id)
        if root == VIEW and names:
            if names.pop(0) != "state":
                return None
            root = STATE
        if root != STATE:
            return root
        return STATE if not names else (names[0] if names[0] in self.fields else None)

    def _params(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
        scope = {}
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            annotation = ast.unparse(arg.annotation) if arg.annotation else ""
            if annotation == "ConversationState":
                scope[arg.arg] = STATE
            elif annotation == "View":
                scope[arg.arg] = VIEW
            elif annotation in self.by_type:
                scope[arg.arg] = self.by_type[annotation]
        return scope

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer, self.attrs = self.attrs, {}
        for fn in ast.walk(node):  # the aliases first: ``self._x = <a part>`` anywhere
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                self.scopes.append(self._params(fn))
                for sub in ast.walk(fn):
                    if isinstance(sub, ast.Assign):
                        for target, value in _pairs(sub):
                            if _is_self_attr(target) and (part := self.part_of(value)) is not None:
                                self.attrs[target.attr] = part  # type: ignore[union-attr]
                self.scopes.pop()
        self.generic_visit(node)
        self.attrs = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(self._params(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _write(self, target: ast.AST, line: int) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._write(element, line)
        elif not isinstance(target, ast.Name) and not (
            _is_self_attr(target) and target.attr in self.attrs  # type: ignore[union-attr]
        ):
            if (part := self.part_of(target)) not in (None, STATE, VIEW):
                self.found.append((part, line))

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._write(target, node.lineno)
        for target, value in _pairs(node):
            if isinstance(target, ast.Name):
                made = (
                    isinstance(value, ast.Call) and ast.unparse(value.func) == "ConversationState"
                )
                part = STATE if made else self.part_of(value)
                if part is None:
                    self.scopes[-1].pop(target.id, None)
                else:
                    self.scopes[-1][target.id] = part
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._write(node.target, node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._write(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._write(target, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            if (part := self.part_of(node.func.value)) not in (None, STATE, VIEW):
                self.found.append((part, node.lineno))
        self.generic_visit(node)


def _is_self_attr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _pairs(node: ast.Assign) -> list[tuple[ast.AST, ast.AST]]:
    """Each target with its value (``a, b = x, y`` pairs them up)."""
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            pairs += zip(target.elts, node.value.elts, strict=False)
        else:
            pairs.append((target, node.value))
    return pairs


def writes_in(source: str) -> list[tuple[str, int]]:
    """The writes of ``source``: (part, line) each."""
    visitor = _Writes(parts())
    visitor.visit(ast.parse(source))
    return visitor.found


def writers(folder: Path) -> dict[str, dict[str, list[int]]]:
    """Part -> module (path below ``folder``'s parent) -> the lines that write it."""
    found: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(folder.rglob("*.py")):
        for part, line in writes_in(path.read_text()):
            found[part][path.relative_to(folder.parent).as_posix()].append(line)
    return found
