"""The agent's instructions as both sides see them: what a worker's ``call_model``
tells a run that asks (the worker's instructions and whether a conversation may add to
them), and what a conversation keeps and carries. No I/O.

A worker's agent has instructions (``PARLEY_INSTRUCTIONS`` or the policy file's
``[agent]`` table, read by ``parley.tools.instructions``), sent as the system message of
every model call. A conversation learns them once per run, from its first model call
(``CallModelInput.ask_instructions``: the worker uses its own and reports them), and
keeps them for the run: a worker restarted with other instructions changes nothing
until the conversation continues as new. A client never replaces them; where the
worker allows it, the message that starts a conversation may add to them.
"""

from __future__ import annotations

import hashlib

from parley.contracts.payloads import Contract

#: Instructions travel with every model call (``CallModelInput``): bounded, in characters.
INSTRUCTIONS_MAX_CHARS = 64 * 1024
#: The memo key under which the Temporal UI shows a run's instructions (name and hash).
INSTRUCTIONS_MEMO = "parley_instructions"


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AgentInstructions(Contract):
    """The agent's instructions: a name people know them by, their text and its sha256
    (which tells two versions of the same name apart)."""

    name: str
    sha256: str
    text: str

    @classmethod
    def of(cls, name: str, text: str) -> AgentInstructions:
        return cls(name=name, sha256=sha256_of(text), text=text)

    def identity(self) -> dict[str, str]:
        """Name and hash, as the audit log and the memo record them."""
        return {"name": self.name, "sha256": self.sha256}

    def label(self) -> str:
        """``planner (sha256 0123456789ab)``: how a person is shown them."""
        return f"{self.name} (sha256 {self.sha256[:12]})"


class WorkerInstructions(Contract):
    """A worker's answer to a run that asks (``CallModelOutput.instructions``): its
    instructions (None: it has none) and whether a conversation may add to them."""

    instructions: AgentInstructions | None = None
    allow_added: bool = False


def system_text(instructions: AgentInstructions | None, added: str | None) -> str | None:
    """The system message of a model call: the worker's instructions, then what the
    conversation added (None: no system message)."""
    parts = [p for p in ((instructions.text if instructions else ""), added or "") if p.strip()]
    return "\n\n".join(parts) if parts else None
