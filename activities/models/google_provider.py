"""``PARLEY_MODEL=google:<model>``: Gemini through the Gemini API
(``langchain-google-genai``, on Google's ``google-genai`` SDK).

Activity side only: the key (``GOOGLE_API_KEY``) comes in the model's own config
(``parley.tools.loading.ModelConfig``, made from the Settings the worker read at start), so it
lives in the worker process and never enters workflow input or history; it is sent in
the ``x-goog-api-key`` header, never in a URL. ``GOOGLE_BASE_URL`` points at another
endpoint (a proxy, a gateway, a local server): requests go to
``<base>/v1beta/models/<model>:streamGenerateContent?alt=sse``, the API version pinned
to the one Google's REST reference uses, whatever the SDK's default.

The base URL, API version and key are given, so the SDK's own variables
(``GOOGLE_GEMINI_BASE_URL``, ``GOOGLE_GENAI_API_VERSION``, ``GEMINI_API_KEY``) and a
LangSmith gateway are not used. The backend is the Gemini API: the SDK would switch to
Vertex AI when ``GOOGLE_GENAI_USE_VERTEXAI`` is set in the worker's environment, and the
model is then refused at start, naming it (Vertex AI is a ``<module>:<factory>`` of your
own).

As for ``openai:`` and ``anthropic:``: the SDK's own retries are off (it counts attempts,
and ``max_retries=1`` is the one attempt; it also turns off the SDK's hidden retry of a
refused connection), Temporal's retry policy for the model activity is the only retry
loop and ``parley.activities.models.failures`` decides what it retries
(``google_errors`` reads Google's errors for it: ``RetryInfo`` delays honoured). Replies
are read as a stream (``call_model`` uses ``astream``): text parts as they arrive, each
``functionCall`` whole (its ``thoughtSignature`` kept with the call, and sent back with
it), usage in every chunk (Gemini's counts so far; the prompt's includes
``cachedContentTokenCount``, the part read from Gemini's cache, in Parley's usage as
``cache_read_tokens``).
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_google_genai import ChatGoogleGenerativeAI

from parley.tools.loading import ModelConfig

#: The Gemini API, given explicitly so that the client reads no environment.
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
API_VERSION = "v1beta"


def build_google_model(config: ModelConfig) -> BaseChatModel:
    """A ``ChatGoogleGenerativeAI`` for the Gemini model ``config`` names.

    ``GOOGLE_API_KEY`` is required; ``GOOGLE_BASE_URL`` is optional (the Gemini API when
    unset); ``PARLEY_MODEL_TIMEOUT_SECONDS`` bounds one HTTP request, its stream read
    whole included (default 120).
    """
    model_name = (config.name or "").strip()
    if not model_name:
        raise ValueError("google: needs a model name, e.g. PARLEY_MODEL=google:gemini-2.5-flash")
    if not config.api_key.strip():
        raise ValueError(
            "GOOGLE_API_KEY is not set: set it in the worker's environment to use "
            f"PARLEY_MODEL=google:{model_name}"
        )
    model = ChatGoogleGenerativeAI(
        model=model_name,
        api_key=config.api_key,
        base_url=config.base_url or DEFAULT_BASE_URL,
        api_version=API_VERSION,
        vertexai=False,
        # The SDK counts attempts, not retries: 1 is the request alone (0 would mean
        # "the SDK's default" in some releases).
        max_retries=1,
        timeout=config.timeout_seconds,
    )
    if model.client is not None and model.client.vertexai:
        raise ValueError(
            "GOOGLE_GENAI_USE_VERTEXAI is set in the worker's environment: "
            f"PARLEY_MODEL=google:{model_name} speaks the Gemini API; unset it"
        )
    return model
