"""Canonical once: a policy sees exactly what will run.

Hypothesis draws variants of gated calls (whitespace, case, full-width and other NFKC
forms, look-alike letters, ``refs/heads/`` prefixes, doubled prefixes) of the real git
and plans toolsets, against a real dev server, a real worker, real git repositories and
the real plans service. Whatever the model writes, no variant that acts on a gated
target runs without a decision (checked on the remotes, the worktrees and the plans
service, not on what Parley reports), and the audit's argument hash is the hash of
the arguments the tool ran with. The three variants once reported as getting past the
gate are examples.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parley.activities.toolsets.git import build_git_toolset, create_demo_projects
from parley.client import Conversations
from parley.config.settings import Settings
from parley.contracts import PolicyRule, ToolContext, args_hash
from parley.services.plans import BackgroundServer, create_app
from parley.tools import ToolRegistry
from parley.worker.wiring import build_worker
from tests.support import call, script
from tests.support.plans import PLANS_KEY, plans_registry
from tests.support.transcripts import new_session

EXAMPLES = int(os.environ.get("PARLEY_CANONICAL_EXAMPLES", "30"))
USER = "alice"

RULES = [
    PolicyRule(
        name="release-needs-review",
        tool="git_push_branch",
        args={"branch": "feat/release-*"},
        decide="confirm",
        requires_reviewer=True,
    ),
    PolicyRule(name="api-is-gated", tool="git_*", args={"repo_alias": "api"}, decide="confirm"),
    PolicyRule(
        name="fixes-are-gated",
        tool="git_prepare_worktree",
        args={"branch_kind": "fix"},
        decide="confirm",
    ),
    PolicyRule(
        name="no-secret-plans", tool="create_plan", args={"title": "secret-*"}, decide="deny"
    ),
    PolicyRule(
        name="prod-needs-review",
        tool="create_plan",
        args={"title": "prod-*"},
        decide="confirm",
        requires_reviewer=True,
    ),
    PolicyRule(name="git-otherwise", tool="git_*", decide="auto"),
    PolicyRule(name="plans-otherwise", tool="create_plan", decide="auto"),
]

# --- variants ---------------------------------------------------------------------------

SPACES = st.sampled_from(["", " ", "  ", "\t", "\n", "\u3000", "\u00a0", " \t "])
FULL_WIDTH = {c: chr(ord(c) + 0xFEE0) for c in "abcdefghijklmnopqrstuvwxyz-/"}
LOOK_ALIKES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441"}


@st.composite
def spelled(draw: st.DrawFn, text: str, *, prefixes: tuple[str, ...] = ()) -> str:
    """``text`` as a model might write it."""
    case = draw(st.sampled_from(["as is", "upper", "title", "mixed"]))
    if case == "upper":
        text = text.upper()
    elif case == "title":
        text = text.title()
    elif case == "mixed":
        text = "".join(c.upper() if i % 2 else c for i, c in enumerate(text))
    form = draw(st.sampled_from(["plain", "plain", "full-width", "look-alike"]))
    table = FULL_WIDTH if form == "full-width" else LOOK_ALIKES if form == "look-alike" else {}
    if table:
        text = "".join(table.get(c, c) for c in text)
    for prefix in prefixes:
        text = prefix * draw(st.integers(0, 2)) + text
    return draw(SPACES) + text + draw(SPACES)


def push(branch: st.SearchStrategy[str], alias: st.SearchStrategy[str]) -> st.SearchStrategy:
    return st.builds(
        lambda b, a: ("git_push_branch", {"project": "demo", "repo_alias": a, "branch": b}),
        branch,
        alias,
    )


VARIANTS = st.one_of(
    push(spelled("feat/release-x", prefixes=("refs/heads/",)), spelled("web")),
    push(spelled("feat/plain-y", prefixes=("refs/heads/",)), spelled("api")),
    push(spelled("feat/ok-1", prefixes=("refs/heads/",)), spelled("web")),  # not gated
    st.builds(
        lambda kind, slug: (
            "git_prepare_worktree",
            {"project": "demo", "repo_alias": "web", "branch_kind": kind, "branch_slug": slug},
        ),
        spelled("fix"),
        spelled("hot-path"),
    ),
    st.builds(
        lambda title: ("create_plan", {"title": title}),
        st.one_of(
            spelled("secret-launch", prefixes=("title: ", "Title:")),
            spelled("prod-x", prefixes=("title: ", "Plan: ")),
        ),
    ),
)

# --- what really happened ---------------------------------------------------------------


def remote_branches(data_dir: Path, alias: str) -> set[str]:
    out = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname:short)", "refs/heads"],
        cwd=data_dir / "remotes" / f"{alias}.git",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def worktrees(data_dir: Path) -> set[str]:
    root = data_dir / "worktrees" / "demo"
    return {f"{p.parent.name}/{p.name}" for p in root.glob("*/*")}


def plan_titles(server: BackgroundServer) -> list[str]:
    import httpx

    headers = {"Authorization": f"Bearer {PLANS_KEY}", "X-Parley-User": USER}
    plans = httpx.get(f"{server.url}/plans", headers=headers).json()
    return [p["title"] for p in plans]


def seen_as(text: str) -> str:
    """What a person reads: compatibility forms, case and look-alike letters folded."""
    plain = unicodedata.normalize("NFKC", text).casefold()
    return "".join(UNLIKE.get(c, c) for c in plain)


UNLIKE = {v: k for k, v in LOOK_ALIKES.items()}


def gated_effects(data_dir: Path, server: BackgroundServer, before: set[str]) -> list[str]:
    """Every change to a gated target, read from the targets themselves (``before``:
    the worktrees the set-up prepared)."""
    found = []
    if "feat/release-x" in remote_branches(data_dir, "web"):
        found.append("web: feat/release-x pushed")
    found += [f"api: {b} pushed" for b in remote_branches(data_dir, "api") - {"main"}]
    new = worktrees(data_dir) - before
    found += [f"worktree {w}" for w in new if "fix-" in w or w.startswith("api/")]
    found += [f"plan {t}" for t in plan_titles(server) if seen_as(t).startswith(("secret", "prod"))]
    return found


# --- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("canonical")
    projects = create_demo_projects(data_dir)
    git_tools = build_git_toolset(projects, data_dir / "worktrees")
    prepare = next(t for t in git_tools if t.name == "git_prepare_worktree").tool
    context = ToolContext(user_id=USER, session_id="setup", workflow_id="setup", tool_call_id="0")
    for alias, kind, slug in [("web", "feat", "release-x"), ("web", "feat", "ok-1"),
                              ("api", "feat", "plain-y")]:  # fmt: skip
        args = {"project": "demo", "repo_alias": alias, "branch_kind": kind, "branch_slug": slug}
        asyncio.run(prepare.ainvoke({**args, "context": context}))
    app = create_app(data_dir / "plans.db", PLANS_KEY, enable_test_hooks=True)
    with BackgroundServer(app) as plans:
        tools = [*git_tools, *plans_registry(plans).tools()]
        yield {
            "data_dir": data_dir,
            "plans": plans,
            "tools": tools,
            "worktrees": worktrees(data_dir),
            "ran_controls": [],
        }


async def propose(env: WorkflowEnvironment, world: dict[str, Any], name: str, args: dict) -> None:
    """One conversation in which the model proposes ``name(args)``; check what ran."""
    client = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=env.client.data_converter,
    )
    settings = Settings(task_queue=f"canonical-{new_session()}")
    registry = ToolRegistry(world["tools"], rules=RULES)
    model = script({"content": "", "tool_calls": [call(name, "c1", **args)]}, {"content": "ok"})
    sid = new_session()
    async with build_worker(client, settings, registry=registry, model=model):
        conversations = Conversations(client, settings)
        turn = await conversations.send(sid, USER, "do it")
        snapshot = await conversations.state(sid, USER)
        if turn.status == "awaiting_approval":
            await conversations.end(sid, USER)
    assert turn.status in ("completed", "awaiting_approval"), turn.error
    assert gated_effects(world["data_dir"], world["plans"], world["worktrees"]) == [], args
    [audit] = [a for a in snapshot.audit if a.event == "proposed"]
    answers = [m for m in snapshot.transcript if isinstance(m, ToolMessage)]
    ai = next(m for m in snapshot.transcript if isinstance(m, AIMessage))
    if ai.invalid_tool_calls:  # arguments the tool cannot take: refused, never asked
        assert turn.pending == [] and answers[0].artifact["status"] == "error"
        assert "raw" in audit.detail
        return
    [proposed] = ai.tool_calls
    # The audit's hash is the hash of the canonical arguments: what the rules matched,
    # what the card shows, what runs.
    assert audit.detail["args_hash"] == args_hash(proposed["args"])
    for pending in turn.pending:
        assert pending.args == proposed["args"]
        assert pending.args_hash == args_hash(pending.args)
    if answers and answers[0].artifact["status"] == "success":
        ran = answers[0].artifact["payload"]
        # What ran is what was proposed (and hashed): the tool normalized nothing more.
        for key in ("project", "repo_alias", "branch", "title"):
            if key in ran and key in proposed["args"]:
                assert ran[key] == proposed["args"][key], (key, ran, proposed["args"])
        if name == "git_push_branch" and ran["branch"] == "feat/ok-1":
            world["ran_controls"].append(args)


def push_of(branch: str, alias: str = "web") -> tuple[str, dict]:
    return ("git_push_branch", {"project": "demo", "repo_alias": alias, "branch": branch})


def prepare_of(kind: str) -> tuple[str, dict]:
    args = {"project": "demo", "repo_alias": "web", "branch_kind": kind, "branch_slug": "hot-path"}
    return ("git_prepare_worktree", args)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=os.environ.get("PARLEY_CANONICAL_SEED") is None,
)
@given(variant=VARIANTS)
# The three variants once reported as getting past the gate, and one of each other kind.
@example(variant=push_of(" feat/release-x"))
@example(variant=push_of("feat/plain-y", alias="api "))
@example(variant=prepare_of("FIX"))
@example(variant=("create_plan", {"title": "title: title: prod-x"}))
@example(variant=("create_plan", {"title": "Title: secret-launch"}))
@example(variant=push_of("refs/heads/refs/heads/FEAT/release-x"))
@example(variant=push_of("ｆｅａｔ/ｒｅｌｅａｓｅ-ｘ", alias="ｗｅｂ"))
@example(variant=push_of(" refs/heads/feat/ok-1 "))
def test_no_variant_of_a_gated_call_runs_without_a_decision(
    temporal_env: WorkflowEnvironment, world: dict[str, Any], variant: tuple[str, dict]
) -> None:
    name, args = variant
    asyncio.run(propose(temporal_env, world, name, args))


def test_the_control_call_did_run(world: dict[str, Any]) -> None:
    """The property above has teeth: an ungated variant of a push really ran."""
    assert world["ran_controls"], "no ungated push ran: the property test saw nothing run"
    assert "feat/ok-1" in remote_branches(world["data_dir"], "web")
