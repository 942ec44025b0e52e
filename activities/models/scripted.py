"""``scripted``: the offline, deterministic default model. Activity side.

It reads plain-English (and a little Chinese) requests for the shipped toolsets and
proposes the matching tool calls, so ``parley dev`` works with no LLM at all:

- "list the repositories of project demo"        → git_list_project_repositories
- "prepare a feat branch PJ1-project-git-extend in web" → git_prepare_worktree
- "push feat/pj1-project-git-extend in web", "push it" → git_push_branch
- "create a plan called Q3 review", "帮我创建一个计划…" → create_plan (the whole sentence
  as title: the toolset normalizes it)
- "list my plans", "show plan 3", "mark plan 3 as done" → list_plans, get_plan,
  update_plan_status ("mark plan 3 as finished" sends the user's word as the status)
- "ask the planner to list my plans" → the subagent ``planner`` (when the policy file
  defines one) with the task "list my plans"
- "what context do you have?" → the front end's context for this turn (AG-UI
  ``context`` and ``state``), repeated word for word
- "tell me a story" → a story of about a hundred words, which streams for a few seconds
  (time enough to send another message while it runs: ``--while-busy``)

After tool results it summarizes them. When a result says "Please fix your mistakes"
it corrects what it can (a slug to kebab-case, an unknown branch kind, an unknown
project, a plan status word such as "finished") and calls again, once per error;
otherwise it reports the error.

So that ``parley dev`` shows what a provider's model does, it streams its reply a word at
a time (``astream``, read by ``call_model`` as any provider's stream, paced by
``word_seconds``: ``PARLEY_MODEL=scripted`` paces it, tests that build it bare do not)
and reports token usage, an estimate (``estimate_tokens``: about four characters a
token, deterministic), marked as one in the reply's ``response_metadata``
(``ESTIMATED_USAGE``, which ``parley.contracts.Usage`` counts), so usage lines and a
``[budget]`` spend mark work offline.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from parley.activities.compaction import CLIENT_CONTEXT_HEADING
from parley.activities.toolsets.git import BRANCH_KINDS
from parley.contracts.usage import ESTIMATED_USAGE

FIX_MARKER = "Please fix your mistakes"
FIXED_NOTE = "I fixed the arguments and will try again."
MAX_FIXES = 3
KIND_WORDS = {"feature": "feat", "bug": "fix", "bugfix": "fix", "doc": "docs", "tests": "test"}
STATUS_WORDS = {
    "finished": "done",
    "complete": "done",
    "completed": "done",
    "closed": "done",
    "started": "active",
    "open": "active",
    "canceled": "cancelled",
    "dropped": "cancelled",
}

STORY = (
    "Once upon a time a careful agent kept a ledger of every promise it made. Each "
    "morning it read the ledger again, from the first line to the last, and each evening "
    "it wrote down what it had done and what it still owed. When a storm knocked the "
    "lights out, the agent lost nothing: the ledger remembered where it stood, the "
    "pending questions waited for their answers, and nobody had to say anything twice. "
    "When the lights came back, the agent picked up its pen at the very word where it "
    "had stopped, finished the sentence, and went on with the day. The end."
)

HELP = (
    "I am Parley's offline model. I understand: 'list the repositories of project demo', "
    "'prepare a feat branch my-change in web', 'push it', 'create a plan called Q3 review', "
    "'list my plans', 'show plan 1', 'mark plan 1 as done'."
)


#: How ``PARLEY_MODEL=scripted`` streams: a word every 30 ms, a reply in at most 0.6 s
#: (the story a word every 60 ms, in at most eight times that: about 5 s).
OFFLINE_WORD_SECONDS = 0.03
OFFLINE_STREAM_SECONDS = 0.6


class ScriptedChatModel(BaseChatModel):
    tool_names: list[str] = Field(default_factory=list)
    #: The pause before each streamed word (0: the reply streams at once), and the most a
    #: reply's words wait in all.
    word_seconds: float = 0.0
    stream_seconds: float = OFFLINE_STREAM_SECONDS

    @property
    def _llm_type(self) -> str:
        return "parley-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        names = [convert_to_openai_tool(t)["function"]["name"] for t in tools]
        return self.model_copy(update={"tool_names": names})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The reply a word at a time, then its tool calls and usage in a last piece."""
        reply = self._reply(messages)
        words = re.findall(r"\s*\S+\s*", reply.text) if isinstance(reply.content, str) else []
        slow = 2 if reply.text == STORY else 1  # time to send another message meanwhile
        pause = min(self.word_seconds * slow, self.stream_seconds * slow**3 / max(1, len(words)))
        for word in words:
            if pause:
                await asyncio.sleep(pause)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        calls = [
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            for i, c in enumerate(reply.tool_calls)
        ]
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_call_chunks=calls,
                usage_metadata=reply.usage_metadata,
                response_metadata=reply.response_metadata,
            )
        )

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        call_prefix = f"call_{sum(isinstance(m, AIMessage) for m in messages)}"
        message = _Turn(messages, self.tool_names, call_prefix).respond()
        input_tokens = estimate_tokens(messages)
        output_tokens = estimate_tokens([message])
        return message.model_copy(
            update={
                "usage_metadata": {
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                },
                "response_metadata": {**message.response_metadata, ESTIMATED_USAGE: True},
            }
        )


def estimate_tokens(messages: Sequence[BaseMessage]) -> int:
    """About how many tokens ``messages`` are (text and tool calls' arguments): a
    character count over four, as a rule of thumb for English; the same text always
    gives the same count."""
    chars = 0
    for message in messages:
        content = message.content
        chars += len(content) if isinstance(content, str) else len(json.dumps(content))
        for call in getattr(message, "tool_calls", None) or []:
            chars += len(call["name"]) + len(json.dumps(call["args"], ensure_ascii=False))
    return (chars + 3) // 4


class _Turn:
    def __init__(self, messages: list[BaseMessage], tools: list[str], call_prefix: str) -> None:
        self.messages = messages
        self.tools = tools
        self.call_prefix = call_prefix

    def respond(self) -> AIMessage:
        last = self.messages[-1] if self.messages else None
        if isinstance(last, ToolMessage):
            return self._after_results()
        text = last.content if isinstance(last, HumanMessage) else ""
        return self._for_request(text if isinstance(text, str) else str(text))

    # --- requests -------------------------------------------------------------------

    def _for_request(self, text: str) -> AIMessage:
        delegated = re.match(
            r"\s*(?:ask|have|let|get)\s+(?:the\s+)?([\w-]+)\s+(?:to\s+)?(.+)", text, re.S | re.I
        )
        if delegated and delegated.group(1) in self.tools:
            return self._call(delegated.group(1), {"task": delegated.group(2).strip()})
        lowered = text.lower()
        if re.search(r"\bstory\b", lowered):
            return AIMessage(content=STORY)
        if re.search(r"\bcontext\b", lowered):
            return AIMessage(content=self._client_context())
        unquoted = re.sub(r'"[^"]*"', "", lowered)
        project = _search(r"\bproject\s+([\w.-]+)", unquoted) or "demo"
        if re.search(r"\bpush\b", lowered):
            return self._push(text, project)
        if re.search(r"\b(prepare|create|start|open|make)\b.*\b(branch|worktree)\b", lowered):
            return self._prepare(text, project)
        if re.search(r"\b(list|show|which)\b.*\brepo", lowered):
            return self._call("git_list_project_repositories", {"project": project})
        # The user's word goes as it is, valid status or not, the way a hasty model
        # would send it; the backend's 422 lists the valid ones and the correction
        # below picks one.
        status_change = re.search(
            r"\b(?:mark|set)\b.*?\bplan\s+#?(\d+)\s+(?:(?:as|to)\s+)?(\w+)", lowered
        )
        if status_change:
            return self._call(
                "update_plan_status",
                {"plan_id": int(status_change.group(1)), "status": status_change.group(2)},
            )
        plan_id = _search(r"\bplan\s+#?(\d+)\b", lowered) or _search(r"计划\s*#?(\d+)", text)
        if plan_id and re.search(r"\b(show|get|open|read)\b|查看", lowered):
            return self._call("get_plan", {"plan_id": int(plan_id)})
        if re.search(r"\b(list|show)\b.*\bplans\b|列出.*计划|查看.*计划", lowered):
            return self._call("list_plans", {})
        if re.search(r"\b(create|make|add|new)\b.*\bplan\b|(创建|新建|建立).*计划", lowered):
            return self._call("create_plan", {"title": text.strip()})
        return AIMessage(content=HELP)

    def _client_context(self) -> str:
        for message in self.messages:
            content = message.content
            if isinstance(message, SystemMessage) and isinstance(content, str):
                if content.startswith(CLIENT_CONTEXT_HEADING):
                    return "Your application told me:" + content[len(CLIENT_CONTEXT_HEADING) :]
        return "Your application gave me no context for this turn."

    def _prepare(self, text: str, project: str) -> AIMessage:
        lowered = re.sub(r'"[^"]*"', "", text.lower())  # a quoted slug is no keyword
        kind = next(
            (
                KIND_WORDS.get(w, w)
                for w in re.findall(r"[a-z]+", lowered)
                if KIND_WORDS.get(w, w) in BRANCH_KINDS
            ),
            "feat",
        )
        slug = _search(r'"([^"]+)"', text) or _search(
            r"\b(?:branch|worktree)\s+(?:called\s+|named\s+)?([^\s\"]+)", text
        )
        repo = self._repo_alias(lowered)
        if not slug:
            return AIMessage(content="Which branch name (slug) should I prepare?")
        args = {"project": project, "repo_alias": repo, "branch_kind": kind, "branch_slug": slug}
        return self._call("git_prepare_worktree", args)

    def _push(self, text: str, project: str) -> AIMessage:
        lowered = text.lower()
        prepared = self._last_payload("git_prepare_worktree")
        branch = _search(r"\b((?:feat|fix|chore|docs|refactor|test)/[\w.-]+)", lowered)
        if branch is None and re.search(r"\b(main|master)\b", lowered):
            branch = _search(r"\b(main|master)\b", lowered)
        if branch is None and prepared:
            branch = prepared.get("branch")
        if branch is None:
            return AIMessage(content="Which branch should I push? Prepare one first.")
        repo = self._repo_alias(lowered, default=(prepared or {}).get("repo_alias", "web"))
        project = (prepared or {}).get("project", project) if "project" not in lowered else project
        return self._call(
            "git_push_branch", {"project": project, "repo_alias": repo, "branch": branch}
        )

    def _repo_alias(self, lowered: str, default: str = "web") -> str:
        for match in re.finditer(
            r"\b(?:in|on|for|to|of)\s+(?:the\s+)?(?:repo(?:sitory)?\s+)?([\w.-]+)", lowered
        ):
            word = match.group(1)
            if word not in {"project", "the", "a", "branch", "main", "master"}:
                return word
        return default

    def _last_payload(self, tool_name: str) -> dict[str, Any] | None:
        for message in reversed(self.messages):
            if isinstance(message, ToolMessage) and message.name == tool_name:
                artifact = message.artifact if isinstance(message.artifact, dict) else {}
                payload = artifact.get("payload")
                if artifact.get("status") == "success" and isinstance(payload, dict):
                    return payload
        return None

    # --- after tool results ---------------------------------------------------------

    def _after_results(self) -> AIMessage:
        last_ai_index = max(i for i, m in enumerate(self.messages) if isinstance(m, AIMessage))
        ai = self.messages[last_ai_index]
        assert isinstance(ai, AIMessage)
        results = [m for m in self.messages[last_ai_index + 1 :] if isinstance(m, ToolMessage)]
        calls = {c["id"]: c for c in ai.tool_calls}
        for refused in ai.invalid_tool_calls:  # arguments refused when proposed
            try:
                args = json.loads(refused.get("args") or "{}")
            except ValueError:
                continue
            calls[refused["id"]] = {"name": refused["name"], "args": args}
        corrected = []
        for result in results:
            call = calls.get(result.tool_call_id)
            if call and FIX_MARKER in str(result.content) and self._corrections() < MAX_FIXES:
                fixed = _correct(call["name"], call["args"], str(result.content))
                if fixed is not None and fixed != call["args"]:
                    corrected.append((call["name"], fixed))
        if corrected:
            return self._calls(corrected, note=FIXED_NOTE)
        return AIMessage(content="\n".join(_summary(r) for r in results))

    def _corrections(self) -> int:
        """How many corrections in a row led here: the model gives up after a few."""
        count = 0
        for message in reversed(self.messages):
            if isinstance(message, HumanMessage):
                break
            if isinstance(message, AIMessage) and FIXED_NOTE in str(message.content):
                count += 1
        return count

    # --- building messages ------------------------------------------------------------

    def _call(self, name: str, args: dict[str, Any]) -> AIMessage:
        return self._calls([(name, args)])

    def _calls(self, calls: list[tuple[str, dict[str, Any]]], note: str = "") -> AIMessage:
        missing = [name for name, _ in calls if name not in self.tools]
        if missing:
            return AIMessage(
                content=f"I cannot do that here: this worker has no {', '.join(missing)} tool."
            )
        return AIMessage(
            content=note,
            tool_calls=[
                {"name": name, "args": args, "id": f"{self.call_prefix}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(calls)
            ],
        )


def _search(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _kebab(value: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")
    return slug[:48].rstrip("-") or "change"


def _correct(name: str, args: dict[str, Any], error: str) -> dict[str, Any] | None:
    """A corrected copy of ``args`` for the error text, or None if nothing fits."""
    fixed = dict(args)
    if "branch_slug" in fixed and "slug" in error.lower():
        fixed["branch_slug"] = _kebab(str(fixed["branch_slug"]))
    if "branch_kind" in fixed and "kind" in error.lower():
        kind = KIND_WORDS.get(str(fixed["branch_kind"]).lower(), "feat")
        fixed["branch_kind"] = kind if kind in BRANCH_KINDS else "feat"
    known = _search(r"known projects?(?: are)?:\s*([\w.-]+)", error)
    if "project" in fixed and known:
        fixed["project"] = known
    if name == "update_plan_status" and "status" in error.lower() and "status" in fixed:
        fixed["status"] = STATUS_WORDS.get(str(fixed["status"]).lower(), fixed["status"])
    if name == "create_plan" and "title" in error.lower() and "title" in fixed:
        fixed["title"] = str(fixed["title"])[:80]
    return fixed


def _summary(result: ToolMessage) -> str:
    artifact = result.artifact if isinstance(result.artifact, dict) else {}
    status = artifact.get("status", result.status)
    if status == "success":
        payload = artifact.get("payload")
        if isinstance(payload, dict) and "subagent" in payload:
            return f"{result.name} answered: {str(result.content)[:400]}"
        shown = json.dumps(payload, ensure_ascii=False) if payload is not None else result.content
        return f"{result.name} succeeded: {str(shown)[:400]}"
    if status == "rejected":
        return f"Understood: {result.name} was not run. {result.content}"
    if status == "expired":
        return f"{result.name} expired without a decision and did not run."
    return f"{result.name} did not work: {result.content}"
