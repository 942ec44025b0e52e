"""``PARLEY_MODEL=openai:<model>``: any OpenAI-compatible chat-completions server.

Activity side only: the key (``OPENAI_API_KEY``) comes in the model's own config
(``parley.tools.loading.ModelConfig``, made from the Settings the worker read at start), so it
lives in the worker process and never enters workflow input or history.
Works for OpenAI, DeepSeek, vLLM, Ollama and anything else speaking the protocol
(``OPENAI_BASE_URL`` points at it).

The SDK's own retries are off (``max_retries=0``): Temporal's retry policy for the model
activity is the only retry loop, and ``parley.activities.models.failures`` decides what it retries.
A server that ignores ``stream: true`` and answers with one JSON body is read whole
(``parley.activities.models.whole_bodies``): the turn goes on.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI

from parley.activities.models.whole_bodies import WholeBodiesAsyncClient, WholeBodiesClient
from parley.tools.loading import ModelConfig


def build_openai_model(config: ModelConfig) -> BaseChatModel:
    """A ``ChatOpenAI`` for the model ``config`` names.

    ``OPENAI_API_KEY`` is required (servers that ignore keys, such as a local Ollama,
    accept any non-empty value); ``OPENAI_BASE_URL`` is optional (OpenAI when unset);
    ``PARLEY_MODEL_TIMEOUT_SECONDS`` bounds one HTTP request (default 120).
    """
    model_name = config.name
    if not model_name or not model_name.strip():
        raise ValueError("openai: needs a model name, e.g. PARLEY_MODEL=openai:gpt-4o-mini")
    if not config.api_key.strip():
        raise ValueError(
            "OPENAI_API_KEY is not set: set it in the worker's environment to use "
            f"PARLEY_MODEL=openai:{model_name} (any non-empty value for servers that do "
            "not check keys, such as a local Ollama or vLLM)"
        )
    return ChatOpenAI(
        model=model_name.strip(),
        base_url=config.base_url,
        api_key=config.api_key,
        max_retries=0,
        timeout=config.timeout_seconds,
        # Not ``streaming=False``: that would make ``astream`` (how ``call_model`` reads
        # every reply, to stream its text) send one whole request instead.
        # Usage (input, output, total tokens) in usage_metadata also when a reply is
        # streamed: the final chunk carries it (stream_options.include_usage).
        stream_usage=True,
        # Chat completions is what DeepSeek, vLLM and Ollama speak; never switch to
        # OpenAI's Responses API by model name.
        use_responses_api=False,
        # A whole JSON body where a stream was asked for is read as that stream.
        http_client=WholeBodiesClient(),
        http_async_client=WholeBodiesAsyncClient(),
    )
