"""Chat models for ``PARLEY_MODEL``. Activity side: only ``call_model`` builds them.

- ``scripted`` (default): offline and deterministic; understands the shipped toolsets'
  requests in plain English, streams its replies a word at a time and estimates its
  token usage (see ``parley.activities.models.scripted``).
- ``script:<file>``: replays a JSON list of assistant messages, for tests and demos.
- ``openai:<model>``: any OpenAI-compatible server through langchain-openai.
- ``anthropic:<model>``: Claude through Anthropic's Messages API (langchain-anthropic).
- ``google:<model>``: Gemini through the Gemini API (langchain-google-genai).
- ``<module>:<factory>``: any langchain-core ``BaseChatModel`` a factory returns; the
  factory takes nothing, or a ``ModelConfig`` (``@factory(ModelConfig)``,
  ``parley.tools.loading``), never the worker's Settings.

What a model is built from is ``ModelAccess`` (``parley.tools.loading``): the models'
part of the Settings the worker read at start, never the Settings themselves.
"""

from __future__ import annotations

import importlib

from langchain_core.language_models import BaseChatModel

from parley.tools.loading import MODEL_CONFIGS, FactoryInputs, ModelAccess, call_factory


def build_chat_model(spec: str, access: ModelAccess | None = None) -> BaseChatModel:
    """The chat model ``PARLEY_MODEL`` names; ``openai:``, ``anthropic:``, ``google:`` and
    a factory that asks for it get a ``ModelConfig`` of their provider's part of
    ``access`` (no model reads the environment, and none is handed another provider's
    key or the worker's other secrets)."""
    spec = spec.strip()
    if spec == "scripted":
        from parley.activities.models.scripted import OFFLINE_WORD_SECONDS, ScriptedChatModel

        return ScriptedChatModel(word_seconds=OFFLINE_WORD_SECONDS)  # streams, as a provider
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ValueError(
            f"PARLEY_MODEL={spec!r} is not understood: use 'scripted', 'script:<file>', "
            "'openai:<model>', 'anthropic:<model>', 'google:<model>' or '<module>:<factory>'"
        )
    if kind == "script":
        from parley.activities.models.script_file import ScriptFileChatModel

        return ScriptFileChatModel.from_file(rest)
    if kind == "openai":
        from parley.activities.models.openai_provider import build_openai_model

        return build_openai_model(_needed(access, spec).config(rest))
    if kind == "anthropic":
        from parley.activities.models.anthropic_provider import build_anthropic_model

        return build_anthropic_model(_needed(access, spec).config(rest, "anthropic"))
    if kind == "google":
        from parley.activities.models.google_provider import build_google_model

        return build_google_model(_needed(access, spec).config(rest, "google"))
    try:
        factory = getattr(importlib.import_module(kind), rest)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"PARLEY_MODEL={spec!r}: cannot load {kind}:{rest}: {err}") from err
    refused = f"{kind}:{rest} is not a zero-argument callable; {FACTORY_SHAPE}"
    if not callable(factory):
        raise ValueError(f"PARLEY_MODEL={spec!r}: {refused}")
    model = call_factory(
        factory,
        FactoryInputs(models=access),
        what=f"PARLEY_MODEL={spec!r}",
        allowed=MODEL_CONFIGS,
        refused=refused,
    )
    if not isinstance(model, BaseChatModel):
        raise ValueError(
            f"PARLEY_MODEL={spec!r} returned a {type(model).__name__}, not a chat model; "
            f"{FACTORY_SHAPE}"
        )
    return model


def _needed(access: ModelAccess | None, spec: str) -> ModelAccess:
    if access is None:  # a programming error: the entry points always pass theirs
        raise ValueError(f"PARLEY_MODEL={spec!r} needs the models' keys (ModelAccess)")
    return access


FACTORY_SHAPE = (
    "a model factory is a zero-argument callable, or one marked @factory(ModelConfig) "
    "(parley.tools.loading), returning a langchain-core BaseChatModel"
)
