"""The model of the fault tests (``tests/test_faults.py``), loaded by real worker
processes through ``PARLEY_MODEL=tests.support.fault_models:held_script``.

It answers from the JSON script ``$PARLEY_TEST_SCRIPT`` like ``script:<file>`` and logs
each call's start (pid) to ``$PARLEY_TEST_MODEL_LOG``; while ``<log>.hold`` exists the
call hangs (the activity heartbeats meanwhile), so a test can kill its worker in the
middle of a model call.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from parley.activities.models.script_file import ScriptFileChatModel


class HeldScript(ScriptFileChatModel):
    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        log = Path(os.environ["PARLEY_TEST_MODEL_LOG"])
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"pid": os.getpid(), "messages": len(messages)}) + "\n")
        while log.with_suffix(".hold").exists():  # noqa: ASYNC110 - set by another process
            await asyncio.sleep(0.2)
        return self._generate(messages, stop=stop)


def held_script() -> HeldScript:
    script = ScriptFileChatModel.from_file(os.environ["PARLEY_TEST_SCRIPT"])
    return HeldScript(entries=script.entries, source=script.source)
