"""The declaration API: a tool, its policy and what else it declares. Activity side
(the worker's registry holds them; the workflow sees only their ``ToolSpec``).

A declaration names one ``BaseTool`` and:

- its policy, ``auto``/``confirm``/``deny`` (:func:`auto`, :func:`confirm`, :func:`deny`);
- ``prepare``: its canonical form of arguments (:meth:`ParleyTool.canonical_args`);
- ``preview``: ``async (args, context) -> dict``, what a call with these canonical
  arguments would change, read from the target without changing it. A call that cannot
  succeed says so in the result (``{"refused": "..."}``); a preview that raises is a
  failed preview (shown, never blocking);
- ``compensate``: ``(args, result_payload) -> InverseCall | None``, a pure function
  giving the call (another registered tool, its arguments) that undoes a run with these
  arguments and this result; None when that run changed nothing.

Example::

    confirm(push, prepare=canonical_push_args, preview=push_preview,
            compensate=lambda args, result: InverseCall(name="delete_branch", args=...))

Also here: the text rules canonical forms share (:func:`identifier`, :func:`one_script`).
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pydantic
from langchain_core.tools import BaseTool, ToolException

from parley.contracts import InverseCall, ToolContext, ToolPolicy, ToolPreview, ToolSpec, args_hash
from parley.contracts.errors import (
    ErrorType,
    ToolInputError,
    ToolPermissionError,
    TransientError,
)
from parley.observability.redaction import redact

CONTEXT_ARG = "context"
POLICIES: tuple[ToolPolicy, ...] = ("auto", "confirm", "deny")


ArgsPreparer = Callable[[dict[str, Any]], dict[str, Any]]
#: ``preview(args, context)``: what a call would change (JSON), read without changing it.
Previewer = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
#: ``compensate(args, result_payload)``: the call that undoes a run, or None.
Compensator = Callable[[dict[str, Any], Any], InverseCall | None]

#: How long a preview may take (seconds): past it, it is a failed preview, reported
#: before ``PREVIEW_ACTIVITY``'s timeout (``parley.contracts.activity_config``).
PREVIEW_TIMEOUT_SECONDS = 30.0

#: How many times ``prepare`` may change its own output before the form counts as
#: unstable (a bug in the tool: the call is refused, never run in some other form).
CANONICAL_ROUNDS = 4

#: The key of a tool's ``metadata`` that names the MCP server serving it, as
#: ``name@version`` (set by the MCP toolset; ``ToolSpec.server``).
SERVER_METADATA = "parley_server"


class UnstableCanonicalForm(ValueError):
    """A tool's ``prepare`` keeps changing its own output: no form is canonical."""


@dataclass(frozen=True)
class ParleyTool:
    """A tool, its policy, and optionally ``prepare``: a pure function that puts
    validated arguments in the tool's canonical form (e.g. a whole sentence given as a
    title becomes the title it names; a branch name loses its whitespace and its
    ``refs/heads/``). It runs when a call is proposed or edited, before any rule or
    person sees the arguments, so the user approves exactly what will run. The tool
    body may normalize again only idempotently: ``canonical_args`` checks that
    ``prepare`` settles, and ``run_tool`` that what it runs is canonical.

    ``preview`` and ``compensate`` (see the module docstring) take the canonical
    arguments; the catalogue says whether a tool has them (``ToolSpec.has_preview``,
    ``has_inverse``)."""

    tool: BaseTool
    policy: ToolPolicy = "confirm"
    prepare: ArgsPreparer | None = None
    preview: Previewer | None = None
    compensate: Compensator | None = None
    #: The tool whose answer is the preview, for an MCP tool's ``[[preview]]`` table
    #: (``parley.tools.mcp_previews``); None for a preview declared in code.
    preview_with: str | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"tool {self.tool.name!r}: policy {self.policy!r} is not one of {POLICIES}"
            )

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def wants_context(self) -> bool:
        if isinstance(self.tool.args_schema, dict):
            return False  # a JSON-schema tool (MCP): no injected arguments
        injected = set(self.tool.get_input_schema().model_fields) - set(
            self.tool.tool_call_schema.model_fields
        )
        return CONTEXT_ARG in injected

    def canonical_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` in this tool's canonical form (see the class docstring). Raises
        ``ToolInputError`` for arguments the tool cannot take, saying why, and
        :class:`UnstableCanonicalForm` if ``prepare`` never settles."""
        current = self._validated(args)
        for _ in range(CANONICAL_ROUNDS):
            if self.prepare is None:
                return current
            try:
                prepared = self._validated(self.prepare(dict(current)))
            except ToolInputError:
                raise
            except (ValueError, TypeError) as err:
                raise ToolInputError(f"invalid arguments for {self.name}: {err}") from err
            if prepared == current:
                return current
            current = prepared
        raise UnstableCanonicalForm(
            f"tool {self.name}: prepare() still changed its own output after "
            f"{CANONICAL_ROUNDS} rounds ({args!r} -> {current!r}); a canonical form must "
            "be a fixed point"
        )

    def _validated(self, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments the tool's schema accepts, as it reads them (pydantic coercion
        and validators); keys it does not name are refused unless it opts in."""
        if not isinstance(args, dict):
            raise ToolInputError(f"the arguments of {self.name} must be a JSON object")
        problem = self.spec().args_error(args)
        if problem:
            raise ToolInputError(f"invalid arguments for {self.name}: {problem}")
        schema = self.tool.tool_call_schema
        if isinstance(schema, dict):
            return dict(args)  # a JSON-schema tool (MCP): the schema check is all
        try:
            model = schema.model_validate(args)
        except pydantic.ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()
            )
            raise ToolInputError(f"invalid arguments for {self.name}: {problems}") from None
        return model.model_dump(mode="json", exclude_unset=True)

    def spec(self) -> ToolSpec:
        """What the workflow knows of this tool; built once (every proposal and every
        run checks arguments against it)."""
        cached = self.__dict__.get("_spec")
        if cached is None:
            cached = self._build_spec()
            object.__setattr__(self, "_spec", cached)  # a frozen dataclass, built lazily
        return cached

    def _build_spec(self) -> ToolSpec:
        call_schema = self.tool.tool_call_schema
        schema = _without_labels(
            call_schema if isinstance(call_schema, dict) else call_schema.model_json_schema()
        )
        if schema.get("description") == self.tool.description:
            del schema["description"]  # the spec says it once
        return ToolSpec(
            name=self.tool.name,
            description=self.tool.description,
            policy=self.policy,
            args_schema=schema,
            # A tool opts into extra arguments through its schema (pydantic
            # ``extra="allow"`` gives ``additionalProperties: true``).
            extra_args_allowed=schema.get("additionalProperties") not in (None, False),
            has_preview=self.preview is not None,
            has_inverse=self.compensate is not None,
            server=(self.tool.metadata or {}).get(SERVER_METADATA),
        )

    async def previewed(self, args: dict[str, Any], context: ToolContext) -> ToolPreview | None:
        """This tool's preview of a call with ``args`` (canonical), bounded in size and
        time; None if the tool declares none. Whatever the preview raises, and arguments
        that are not canonical, make a failed preview with a one-line error (redacted:
        no secret, no traceback), never an exception."""
        if self.preview is None:
            return None
        digest = args_hash(args)
        try:
            canonical = self.canonical_args(args)
        except (ToolInputError, UnstableCanonicalForm) as err:
            return ToolPreview.failed(redact(str(err)), ErrorType.TOOL_INPUT, args_hash=digest)
        if canonical != args:
            return ToolPreview.failed(
                f"no preview of {self.name}: its arguments are not in canonical form "
                f"(that is {canonical})",
                ErrorType.TOOL_INPUT,
                args_hash=digest,
            )
        try:
            async with asyncio.timeout(PREVIEW_TIMEOUT_SECONDS):
                data = await self.preview(dict(args), context)
            return ToolPreview.of(_JSON.dump_python(data, mode="json"), args_hash=digest)
        except Exception as exc:
            return ToolPreview.failed(
                redact(_one_line(exc)), preview_error_type(exc), args_hash=digest
            )


#: Keywords whose value maps names (of properties, definitions) to schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

#: Keywords whose value is data (a default, an example), not a schema.
_SCHEMA_VALUES = ("default", "const", "enum", "examples")


def _without_labels(schema: Any) -> Any:
    """A JSON schema without pydantic's ``title`` labels ("Title" for ``title``): they
    validate nothing and the catalogue is workflow history. A property *named* title
    stays."""
    if isinstance(schema, list):
        return [_without_labels(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    slim: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_VALUES:
            slim[key] = value  # data, not schema: kept as written
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            slim[key] = {name: _without_labels(sub) for name, sub in value.items()}
        else:
            slim[key] = _without_labels(value)
    return slim


#: A preview's result as JSON (a pydantic model, a date: what pydantic can write).
_JSON: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"the preview took longer than {PREVIEW_TIMEOUT_SECONDS:g} s"
    text = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, ToolException) and text:
        return text  # the tool's own words: no class name (an adapter's may be private)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def preview_error_type(exc: BaseException) -> str:
    """The row of design.md's error table a preview's failure falls in (as
    ``activities.tool_calls.tool_failure`` maps a run's): only a transient one is worth
    another try."""
    if isinstance(exc, TransientError | TimeoutError | ConnectionError):
        return ErrorType.TOOL_TRANSIENT
    if isinstance(exc, ToolInputError | pydantic.ValidationError):
        return ErrorType.TOOL_INPUT
    if isinstance(exc, ToolPermissionError | PermissionError):
        return ErrorType.TOOL_PERMISSION
    return ErrorType.TOOL_FAILED


def auto(
    tool: BaseTool, *, preview: Previewer | None = None, compensate: Compensator | None = None
) -> ParleyTool:
    return ParleyTool(tool, "auto", preview=preview, compensate=compensate)


def confirm(
    tool: BaseTool, *, preview: Previewer | None = None, compensate: Compensator | None = None
) -> ParleyTool:
    return ParleyTool(tool, "confirm", preview=preview, compensate=compensate)


def deny(
    tool: BaseTool, *, preview: Previewer | None = None, compensate: Compensator | None = None
) -> ParleyTool:
    return ParleyTool(tool, "deny", preview=preview, compensate=compensate)


def identifier(value: str) -> str:
    """An identifier-like argument (a project, an alias, a branch) in canonical text:
    Unicode NFKC (full-width and compatibility forms become their plain letters) and no
    surrounding whitespace, in one script per word (:func:`one_script`). Idempotent."""
    return one_script(unicodedata.normalize("NFKC", value).strip())


#: Scripts whose letters look alike: a word may use one of them, not several.
CONFUSABLE_SCRIPTS = frozenset({"LATIN", "CYRILLIC", "GREEK"})


def one_script(value: str) -> str:
    """``value``, unless a word of it mixes Latin, Cyrillic and Greek letters (``sеcret``
    with a Cyrillic ``е`` looks like ``secret`` to a person and to no rule), which is
    refused the way browsers refuse such host names. Other scripts mix freely."""
    for word in _WORDS.findall(value):
        scripts = {unicodedata.name(c, "?").split(" ")[0] for c in word if c.isalpha()}
        mixed = sorted(scripts & CONFUSABLE_SCRIPTS)
        if len(mixed) > 1:
            raise ToolInputError(
                f"{value!r} mixes {' and '.join(s.title() for s in mixed)} letters in "
                f"{word!r}; write each word in one script"
            )
    return value


_WORDS = re.compile(r"\w+")
