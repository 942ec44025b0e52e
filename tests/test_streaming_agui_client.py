"""End to end: the official AG-UI client sees the reply stream: ``@ag-ui/client``'s
``HttpAgent`` in Node (tests/js/, installed from its lock file by npm) runs against the
real gateway's ``/agui`` with a bearer token, while a provider speaking the OpenAI
protocol writes 30 words at 100 ms each through the real worker.

What must hold for a client we did not write: the first text delta reaches it before
the provider wrote its last word, several deltas come before the message ends (the
batches: 20 ms after the first word, then 250 ms, 500 ms, one a second), and the
deltas add up to the reply stored in the conversation.
"""

from __future__ import annotations

from tests.support import registry
from tests.support.agui_client import run_http_agent
from tests.support.gateway import ALICE_TOKEN, serve_gateway
from tests.support.openai_env import THIRTY_WORDS, openai_model, stored_reply
from tests.support.openai_fake import FakeOpenAI
from tests.support.transcripts import new_session


async def test_the_official_http_agent_sees_the_reply_stream_while_the_provider_writes(
    agui_client, parley_worker, fake: FakeOpenAI
) -> None:
    fake.reply(THIRTY_WORDS, chunk_delay=0.1)
    sid = new_session()
    async with (
        parley_worker(registry(), openai_model()) as conversations,
        serve_gateway(conversations) as url,
    ):
        run = await run_http_agent(url, ALICE_TOKEN, sid, "talk to me")
        snapshot = await conversations.state(sid, "alice")

    (provider,) = fake.streams
    assert provider.completed and provider.text == THIRTY_WORDS
    kinds = [event["type"] for _, event in run.events]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
    contents = run.of_type("TEXT_MESSAGE_CONTENT")
    ((ended_at, _),) = run.of_type("TEXT_MESSAGE_END")
    first_delta_at = contents[0][0]
    assert first_delta_at < provider.delta_times[-1], (
        f"the first delta came {first_delta_at - provider.delta_times[-1]:.3f}s "
        "after the provider's last word"
    )
    # A 3 s reply: batches at about 0.02, 0.27, 0.77, 1.77 and 2.77 s.
    assert len([at for at, _ in contents if at < ended_at]) >= 3, len(contents)
    reply = stored_reply(snapshot)
    assert "".join(event["delta"] for _, event in contents) == reply.content == THIRTY_WORDS
    assert {event["messageId"] for _, event in contents} == {reply.id}
    # the agent built the same message from the stream
    (assistant,) = [m for m in run.messages if m["role"] == "assistant"]
    assert assistant["id"] == reply.id and assistant["content"] == THIRTY_WORDS
