"""The system message of a ``call_model`` call: the agent's instructions. Activity side.

A run that has not learned the instructions yet asks (``CallModelInput.ask_instructions``):
the worker uses its own, read at start (``parley.tools.instructions``), with what the
conversation added, and reports them with the reply, so the answer is in history. A
worker restarted with other instructions replays the run with the ones it began with;
the conversation takes the new ones when it continues as new and asks again
(``parley.workflows.turn.instructions``). Later calls of the run carry the text they keep.
An addition on a worker that does not allow one is refused before the model is called.
Nothing here reads a file or the environment.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from parley.contracts import CallModelInput
from parley.contracts.errors import ErrorType
from parley.contracts.instructions import WorkerInstructions, system_text
from parley.tools.instructions import AgentSetup


def system_message(
    request: CallModelInput, agent: AgentSetup
) -> tuple[str | None, WorkerInstructions | None]:
    """The call's system text, and the worker's answer when the run asked."""
    if not request.ask_instructions:
        return request.instructions, None
    if request.added_instructions and not agent.allow_added:
        raise ApplicationError(
            "this deployment does not let a conversation add to the agent's instructions "
            "(the worker's PARLEY_ALLOW_ADDED_INSTRUCTIONS is off); start a new "
            "conversation without them",
            type=ErrorType.INSTRUCTIONS_REFUSED,
            non_retryable=True,
        )
    answer = WorkerInstructions(instructions=agent.instructions, allow_added=agent.allow_added)
    return system_text(agent.instructions, request.added_instructions), answer
