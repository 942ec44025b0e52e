"""The workflow modules' code is compiled once per worker process and shared by every
sandboxed instance (``parley/worker/code_cache.py``): a fresh import of the workflow
package reuses the code objects (never the module: each instance still executes its
own), and a real worker's sandbox loads its modules through the shared loader."""

from __future__ import annotations

import subprocess
import sys

from parley.contracts import Decision
from parley.worker import code_cache
from tests.support import registry
from tests.support.scripts import call, script
from tests.support.transcripts import new_session

FRESH_IMPORTS = """
import sys
import parley.workflows.conversation as first
from parley.worker.code_cache import SharedCodeLoader, share_workflow_code
share_workflow_code()
share_workflow_code()  # once is enough; twice changes nothing
def fresh():
    for name in [m for m in sys.modules if m.startswith("parley.workflows")]:
        del sys.modules[name]
    import parley.workflows.conversation as module
    return module
a, b = fresh(), fresh()
assert a is not b and a.ConversationWorkflow is not b.ConversationWorkflow
assert a.ConversationWorkflow.run.__code__ is b.ConversationWorkflow.run.__code__
assert type(a.__spec__.loader) is SharedCodeLoader
assert sum(type(f).__name__ == "SharedCodeFinder" for f in sys.meta_path) == 1
print("shared")
"""


def test_fresh_imports_share_code_objects_and_never_modules() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_IMPORTS], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "shared"


async def test_the_sandbox_loads_the_workflow_modules_through_the_shared_loader(
    parley_worker,
) -> None:
    model = script(
        {"content": "", "tool_calls": [call("write_record", "c1", title="Q3")]},
        {"content": "Written."},
    )
    async with parley_worker(registry(), model) as conversations:
        sid = new_session()
        await conversations.send(sid, "ann", "write Q3")
        done = await conversations.decide(
            sid, "ann", [Decision(tool_call_id="c1", action="approve")]
        )
        assert done.status == "completed"
    loaded = {path.replace("\\\\", "/") for path in code_cache.CODES}
    assert any(path.endswith("workflows/conversation.py") for path in loaded)
    assert any(path.endswith("workflows/intake.py") for path in loaded)
