"""The offline model (``parley.activities.models.scripted``) shows what a provider's
does: with ``PARLEY_MODEL=scripted`` (``parley dev``'s default) its reply streams a word
at a time through ``call_model``'s own streaming path (``astream`` → ``ReplyStreamer`` →
``stream_delta`` batches), and it reports token usage, an estimate said to be one. The
whole tour in ``parley dev`` (streaming, usage, a spend mark) is
``tests/test_dev_tour.py``'s."""

from __future__ import annotations

from langchain_core.messages import HumanMessage

from parley.activities.model_calls import _streamed_reply
from parley.activities.models import build_chat_model
from parley.activities.models.scripted import ScriptedChatModel, estimate_tokens
from parley.cli.rendering import usage_line
from parley.contracts import StreamDelta, Usage


async def test_the_offline_model_streams_word_by_word_and_reports_usage() -> None:
    model = build_chat_model("scripted")
    sent: list[StreamDelta] = []

    async def send(delta: StreamDelta) -> None:
        sent.append(delta)

    asked = [HumanMessage("hello")]
    reply = await _streamed_reply(model, asked, send, "parley-ai-offline")
    assert len(sent) >= 2, [d.text for d in sent]  # more than one batch, in order
    assert [d.sequence for d in sent] == list(range(1, len(sent) + 1))
    assert reply.text.startswith("".join(d.text for d in sent))
    assert reply.text == (await ScriptedChatModel().ainvoke(asked)).text

    usage = Usage.of_call(reply)
    assert usage.input_tokens == estimate_tokens(asked) > 0
    assert usage.output_tokens == estimate_tokens([reply]) > 0
    assert usage.estimated_calls == 1
    total = usage + usage
    assert total.estimated_calls == 2 and total.total_tokens == 2 * usage.total_tokens
    assert "estimated" in usage_line(total)
    assert "estimated" not in usage_line(Usage(input_tokens=3, total_tokens=3, model_calls=1))


async def test_a_streamed_call_proposal_is_the_same_call() -> None:
    model = ScriptedChatModel(tool_names=["git_list_project_repositories"], word_seconds=0.001)
    asked = [HumanMessage("list the repositories of project demo")]
    whole = await _streamed_reply(model, asked, None, "unused")  # not streamed: ainvoke
    sent: list[StreamDelta] = []

    async def send(delta: StreamDelta) -> None:
        sent.append(delta)

    reply = await _streamed_reply(model, asked, send, "parley-ai-calls")
    assert reply.tool_calls == whole.tool_calls != []
    assert reply.tool_calls[0]["args"] == {"project": "demo"}
    assert Usage.of_call(reply) == Usage.of_call(whole)
