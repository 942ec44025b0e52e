"""The agent's instructions, read at worker start. Worker side (toolkit): read by the
entry points' loading (``parley.tools.load_registry``, kept on the registry), used by
the worker's ``call_model`` (``parley.activities.instructions``) and shown by
``parley tools``.

Two places may give them, one at a time:

- ``PARLEY_INSTRUCTIONS``: the text, or ``@path`` to a file (named by its stem);
- the policy file's ``[agent]`` table: ``instructions`` (the text) or
  ``instructions_file`` (a path beside the policy file), and a ``name``.

``[agent] name`` names them wherever the text comes from (else the file's stem, else
``agent``). ``PARLEY_ALLOW_ADDED_INSTRUCTIONS=true`` lets the message that starts a
conversation add to them. Every mistake (a file that is not there or empty, the text
given in both places, instructions past the size bound, a flag that is not true or
false) is one ``ValueError`` line naming the setting, raised before Temporal is
contacted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from parley.contracts.instructions import INSTRUCTIONS_MAX_CHARS, AgentInstructions
from parley.tools.policies import AgentTable

ENV = "PARLEY_INSTRUCTIONS"
ALLOW_ENV = "PARLEY_ALLOW_ADDED_INSTRUCTIONS"
DEFAULT_NAME = "agent"
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


@dataclass(frozen=True)
class AgentSetup:
    """What a worker's agent is told: its instructions (None: none), where they come
    from (for ``parley tools``), and whether a conversation may add to them."""

    instructions: AgentInstructions | None = None
    source: str = ""
    allow_added: bool = False


def load_agent(
    environ: Mapping[str, str],
    table: AgentTable | None = None,
    policies_file: str | Path | None = None,
) -> AgentSetup:
    """The worker's agent from ``environ`` and the policy file's ``[agent]`` ``table``."""
    allow = _flag(environ.get(ALLOW_ENV, ""))
    raw = environ.get(ENV, "")
    from_table = table is not None and (
        table.instructions is not None or table.instructions_file is not None
    )
    if raw.strip() and from_table:
        raise ValueError(
            f"{ENV} and the policy file's [agent] table both give the agent's instructions; "
            "give them in one place"
        )
    name = table.name.strip() if table is not None else ""
    if raw.strip():
        if raw.strip().startswith("@"):
            path = Path(raw.strip()[1:]).expanduser()
            text, source = _read(path, f"{ENV}=@{path}"), f"{ENV}=@{path}"
            name = name or path.stem
        else:
            text, source = raw, ENV
    elif table is not None and table.instructions_file is not None:
        path = Path(table.instructions_file).expanduser()
        if not path.is_absolute() and policies_file is not None:
            path = Path(policies_file).parent / path
        where = f"PARLEY_POLICIES: {policies_file}: [agent]: instructions_file"
        text, source = _read(path, where), f"{policies_file} [agent] ({path})"
        name = name or path.stem
    elif table is not None and table.instructions is not None:
        text, source = table.instructions, f"{policies_file} [agent]"
    else:
        return AgentSetup(allow_added=allow)
    if not text.strip():
        raise ValueError(f"{source}: the instructions are empty")
    if len(text) > INSTRUCTIONS_MAX_CHARS:
        raise ValueError(
            f"{source}: the instructions have {len(text):,} characters, more than "
            f"{INSTRUCTIONS_MAX_CHARS:,} (they travel with every model call)"
        )
    return AgentSetup(AgentInstructions.of(name or DEFAULT_NAME, text), source, allow)


def _read(path: Path, setting: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{setting}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        raise ValueError(f"{setting}: cannot read it: {reason}") from None


def _flag(value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{ALLOW_ENV}={value!r}: write true or false")
