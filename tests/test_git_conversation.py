"""The git toolset through whole conversations with the offline `scripted` model: real
repositories, a real bare remote, the confirmation gate, and the model correcting
itself after a 422."""

from __future__ import annotations

import subprocess
from pathlib import Path

from parley.activities.models.scripted import ScriptedChatModel
from parley.activities.toolsets.git import build_git_toolset, create_demo_projects
from parley.contracts import Decision
from parley.tools import ToolRegistry
from tests.support.transcripts import envelope_status, new_session, tool_messages


async def approve_all(conv, sid: str, user: str):
    pending = (await conv.state(sid, user)).pending
    return await conv.decide(
        sid, user, [Decision(tool_call_id=p.tool_call_id, action="approve") for p in pending]
    )


def remote_has(data_dir: Path, alias: str, branch: str) -> bool:
    result = subprocess.run(
        [
            "git",
            "--git-dir",
            str(data_dir / "remotes" / f"{alias}.git"),
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/{branch}",
        ],
        capture_output=True,
    )
    return result.returncode == 0


async def test_prepare_correct_and_push_through_the_gate(parley_worker, tmp_path: Path) -> None:
    projects = create_demo_projects(tmp_path)
    tools = ToolRegistry(build_git_toolset(projects))
    async with parley_worker(tools, ScriptedChatModel()) as conv:
        sid, user = new_session(), "gina"
        turn = await conv.send(sid, user, 'prepare a feat branch "PJ1 project git extend!" in web')
        # A slug the tool cannot take is refused when proposed (its canonical form is
        # checked then): nobody is asked to approve it, the model fixes it and asks again.
        assert turn.status == "awaiting_approval"
        assert [p.name for p in turn.pending] == ["git_prepare_worktree"]
        assert turn.results[0].status == "error"
        assert turn.results[0].content.endswith("Please fix your mistakes.")
        assert turn.pending[0].args["branch_slug"] == "pj1-project-git-extend"

        turn = await approve_all(conv, sid, user)
        assert turn.status == "completed"
        assert turn.results[0].payload["branch"] == "feat/pj1-project-git-extend"
        assert Path(turn.results[0].payload["worktree"]).is_dir()
        assert not remote_has(tmp_path, "web", "feat/pj1-project-git-extend")

        turn = await conv.send(sid, user, "push it")
        assert turn.pending[0].args == {
            "project": "demo",
            "repo_alias": "web",
            "branch": "feat/pj1-project-git-extend",
        }
        # Not pushed before the approval.
        assert not remote_has(tmp_path, "web", "feat/pj1-project-git-extend")
        turn = await approve_all(conv, sid, user)
        assert turn.status == "completed" and turn.results[0].status == "success"
        assert remote_has(tmp_path, "web", "feat/pj1-project-git-extend")

        state = await conv.state(sid, user)
        answers = tool_messages(state.transcript)
        assert [envelope_status(m) for m in answers.values()] == ["error", "success", "success"]


async def test_upper_case_slug_passes_lower_cased(parley_worker, tmp_path: Path) -> None:
    tools = ToolRegistry(build_git_toolset(create_demo_projects(tmp_path)))
    async with parley_worker(tools, ScriptedChatModel()) as conv:
        sid, user = new_session(), "hank"
        await conv.send(sid, user, "prepare a feat branch PJ1-project-git-extend in api")
        turn = await approve_all(conv, sid, user)
        assert turn.status == "completed"
        assert turn.results[0].payload["branch"] == "feat/pj1-project-git-extend"


async def test_refused_pushes_reach_the_model_neutrally(parley_worker, tmp_path: Path) -> None:
    tools = ToolRegistry(build_git_toolset(create_demo_projects(tmp_path)))
    async with parley_worker(tools, ScriptedChatModel()) as conv:
        sid, user = new_session(), "ivy"
        for request, expected in [
            ("push main in web", "protected"),
            ("push feat/never-prepared in web", "not prepared"),
            ("push feat/x in nosuchrepo", "nosuchrepo"),
        ]:
            await conv.send(sid, user, request)
            turn = await approve_all(conv, sid, user)
            assert turn.status == "completed"
            (result,) = turn.results
            assert result.status == "error" and result.error.type == "ToolPermissionError"
            assert result.content.startswith("Error: ") and "Please fix" not in result.content
            assert expected in result.content.lower() or expected in result.content
        assert not remote_has(tmp_path, "web", "feat/never-prepared")
