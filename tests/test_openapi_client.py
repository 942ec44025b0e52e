"""A client generated from the gateway's OpenAPI document drives a conversation:
``openapi-python-client`` (PyPI) generates it from the real gateway's ``/openapi.json``,
and the test uses only the generated code, against the real gateway, worker and dev
server.

What must hold for an integrator who generates a client: every answer is parsed into
the document's models (a turn, the conversation, the listing), every error status the
gateway sends is parsed into the one error shape (not ``None``), ``/agui`` and the
event stream document their bodies, and internal fields stay out.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx

from tests.support import RUNS, call, registry, runs_of, script
from tests.support.gateway import ALICE_TOKEN, BOB_TOKEN, serve_gateway
from tests.support.transcripts import new_session

PACKAGE = "parley_gateway_client"


async def generate_client(base: str, into: Path) -> None:
    """``openapi-python-client generate`` from the live document, as an integrator runs it."""
    document = into / "openapi.json"
    async with httpx.AsyncClient() as http:
        document.write_text((await http.get(f"{base}/openapi.json")).text)
    bin_dir = Path(sys.executable).parent  # the generator formats with ruff, from here
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(into / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr


def load(into: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module(f"{PACKAGE}.{name}")
    finally:
        sys.path.remove(str(into))


async def test_a_generated_client_drives_a_conversation_and_parses_every_error(
    parley_worker, tmp_path: Path
) -> None:
    RUNS.clear()
    model = script(
        {"content": "I will write it.", "tool_calls": [call("write_record", "c1", title="Q3")]},
        {"content": "Written."},
    )
    sid = new_session()
    async with (
        parley_worker(registry(), model) as conversations,
        serve_gateway(conversations) as base,
    ):
        await generate_client(base, tmp_path)
        client_module = load(tmp_path, "client")
        api = {
            name: load(tmp_path, f"api.conversations.{name}")
            for name in (
                "post_message",
                "post_decisions",
                "get_conversation",
                "list_conversations",
                "export_audit",
            )
        }
        models = load(tmp_path, "models")
        alice = client_module.AuthenticatedClient(base_url=base, token=ALICE_TOKEN, timeout=60)
        bob = client_module.AuthenticatedClient(base_url=base, token=BOB_TOKEN, timeout=60)
        nobody = client_module.Client(base_url=base, timeout=60)

        sent = await api["post_message"].asyncio_detailed(
            sid, client=alice, body=models.MessageBody(text="write the Q3 record")
        )
        assert sent.status_code == 200
        turn = sent.parsed
        assert isinstance(turn, models.TurnResult), turn
        assert turn.status == "awaiting_approval" and turn.pending[0].tool_call_id == "c1"

        # Every error the gateway sends comes back parsed in the one shape.
        refusals = {
            401: await api["post_message"].asyncio_detailed(
                sid, client=nobody, body=models.MessageBody(text="hello")
            ),
            404: await api["get_conversation"].asyncio_detailed(sid, client=bob),
            409: await api["post_message"].asyncio_detailed(
                sid, client=alice, body=models.MessageBody(text="and another thing")
            ),
            422: await api["post_decisions"].asyncio_detailed(
                sid,
                client=alice,
                body=models.DecisionsBody(
                    decisions=[
                        models.StrictDecision(
                            tool_call_id="nope", action=models.StrictDecisionAction.APPROVE
                        )
                    ]
                ),
            ),
        }
        for status, answer in refusals.items():
            assert answer.status_code == status, (status, answer.content)
            assert isinstance(answer.parsed, models.ErrorResponse), (status, answer.parsed)
            assert answer.parsed.error.type_ and answer.parsed.error.message, answer.parsed
        assert refusals[409].parsed.error.type_ == "DecisionsOwed"
        assert refusals[404].parsed.error.type_ == "NotFound"
        assert runs_of("write_record") == []

        decided = await api["post_decisions"].asyncio_detailed(
            sid,
            client=alice,
            body=models.DecisionsBody(
                decisions=[
                    models.StrictDecision(
                        tool_call_id="c1", action=models.StrictDecisionAction.APPROVE
                    )
                ]
            ),
        )
        assert isinstance(decided.parsed, models.TurnResult), decided.content
        assert decided.parsed.status == "completed" and decided.parsed.reply == "Written."
        assert [r.status for r in decided.parsed.results] == ["success"]
        assert [run["title"] for run in runs_of("write_record")] == ["Q3"]

        shown = await api["get_conversation"].asyncio_detailed(sid, client=alice)
        view = shown.parsed
        assert isinstance(view, models.ConversationView), shown.content
        assert view.status == "idle" and view.pending == []
        assert [entry.event for entry in view.audit].count("decided") == 1
        assert len(view.transcript) == 4 and view.temporal_ui_url
        assert b"model_context" not in shown.content  # internal: not sent, not documented
        assert b"audit_archive" not in shown.content

        exported = await api["export_audit"].asyncio_detailed(
            sid, client=alice, format_=models.ExportAuditFormat.JSON
        )
        export = exported.parsed
        assert isinstance(export, models.AuditExport), exported.content
        assert export.header.count == len(export.entries) == len(view.audit)
        assert export.header.head == export.entries[-1].hash_
        for before, entry in zip(export.entries, export.entries[1:], strict=False):
            assert entry.prev_hash == before.hash_
        (decision,) = [e for e in export.entries if e.event == "decided"]
        assert (decision.actor, decision.channel) == ("alice", "update") and decision.args_hash

        listed = await api["list_conversations"].asyncio_detailed(client=alice)
        assert isinstance(listed.parsed, models.ConversationList)
        assert sid in [c.session_id for c in listed.parsed.conversations]

    document = (tmp_path / "openapi.json").read_text()
    assert "model_context" not in document
    view_fields = json.loads(document)["components"]["schemas"]["ConversationView"]["properties"]
    assert "audit_archive" not in view_fields
    assert '"RunAgentInput"' in document and "text/event-stream" in document
    error_shape = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, operations in json.loads(document)["paths"].items():
        if not path.startswith(("/v1/", "/agui")):
            continue
        for method, operation in operations.items():
            for status in ("401", "404", "409", "413", "422", "502", "503"):
                answer = operation["responses"].get(status, {})
                shape = answer.get("content", {}).get("application/json", {}).get("schema")
                assert shape == error_shape, (method, path, status)
