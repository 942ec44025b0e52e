"""How contracts travel as payloads: the ``Contract`` base, the compact payload
converter and LangChain messages as payloads carry them. Pure: no I/O."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pydantic_core
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from pydantic import (
    BaseModel,
    BeforeValidator,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)
from temporalio.converter import CompositePayloadConverter, EncodingPayloadConverter

#: The serialization context of every payload (:class:`PayloadConverter`). Only there
#: does a :class:`Contract` leave out its empty fields: what users read (``--json``
#: output, AG-UI events) keeps every key.
PAYLOAD_CONTEXT = {"parley": "payload"}


class Contract(BaseModel):
    """Base of every payload type. In a payload (and only there) a field left at its
    empty default is left out: None, ``[]`` from ``default_factory=list``, or a zero
    (``False``, ``0``, ``0.0``, ``""``) that is the field's default. Reading it back
    gives the default again. History does not pay for ``"error": null``,
    ``"rewinds": 0`` or a usage of zero tokens on every turn. The rule this asks of a
    contract: a field's empty default never changes meaning (a new default is a new
    field), since an old payload that left it out is read with the new one."""

    @model_serializer(mode="wrap")
    def _without_empty_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> Any:
        data = handler(self)
        if info.mode_is_json() and info.context == PAYLOAD_CONTEXT and isinstance(data, dict):
            for name, field in type(self).model_fields.items():
                if name not in data:
                    continue
                if _is_empty_default(field.default, field.default_factory, data[name]):
                    del data[name]
            if isinstance(self, _ContentOfPayload) and "payload" in data:
                if data.get("content") == _payload_json(data["payload"]):
                    del data["content"]  # rebuilt on reading, see _ContentOfPayload
        return data


#: The types whose zero a payload leaves out when it is the field's default.
_ZERO_TYPES = (bool, int, float, str)


def _is_empty_default(default: Any, factory: Any, value: Any) -> bool:
    if factory is list:
        return value == []
    if default is None:
        return value is None
    return (
        type(default) in _ZERO_TYPES
        and not default
        and type(value) is type(default)
        and value == default
    )


def _payload_json(payload: Any) -> str:
    """A tool's JSON result as its content (``activities.tool_calls.envelope_of``)."""
    return json.dumps(payload, ensure_ascii=False)


class _ContentOfPayload(Contract):
    """A result with ``content`` and ``payload``, where content is most often the
    payload's JSON (a tool that returns a dict). In a payload that content is left out
    and rebuilt on reading, so a 20 KB result costs 20 KB of history, not 40."""

    @model_validator(mode="before")
    @classmethod
    def _content_from_payload(cls, data: Any) -> Any:
        if isinstance(data, dict) and "content" not in data and data.get("payload") is not None:
            return {**data, "content": _payload_json(data["payload"])}
        return data


class _CompactJSONConverter(PydanticJSONPlainPayloadConverter):
    """``json/plain`` as pydantic writes it, in :data:`PAYLOAD_CONTEXT`."""

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(
            metadata={"encoding": self.encoding.encode()},
            data=pydantic_core.to_json(value, context=PAYLOAD_CONTEXT),
        )


class PayloadConverter(PydanticPayloadConverter):
    """``pydantic_data_converter``'s payload converter with compact contracts (see
    :class:`Contract`); reading is unchanged, so it reads any pydantic-written payload.

    Every instance shares one set of encoding converters. The SDK builds a new payload
    converter each time it gives a data converter a serialization or storage context
    (dozens of times per turn); each would otherwise build its converters again and
    start with an empty cache of pydantic type adapters, so every payload read would
    build its type's validator anew. The converters hold no per-call state, and the
    adapter cache is thread-safe (``functools.lru_cache``)."""

    _shared: tuple[EncodingPayloadConverter, ...] | None = None

    def __init__(self) -> None:
        if PayloadConverter._shared is None:
            compact = _CompactJSONConverter()
            PayloadConverter._shared = tuple(
                compact if c.encoding == compact.encoding else c
                for c in PydanticPayloadConverter().converters.values()
            )
        CompositePayloadConverter.__init__(self, *PayloadConverter._shared)


def _compact_message(message: BaseMessage, info: SerializationInfo | None = None) -> dict[str, Any]:
    """A message's JSON without its empty fields (None, ``{}``, ``[]``: each one's
    default), keeping ``content`` and ``type`` (which selects the class on the way back).
    In a payload, a tool message whose content is its artifact's payload as JSON (a tool
    that returned a dict) leaves the content out: :func:`_content_from_artifact` rebuilds
    it on reading, so the result is carried once."""
    data = message.model_dump(mode="json")
    compact = {
        key: value
        for key, value in data.items()
        if key in ("content", "type") or value not in (None, {}, [])
    }
    artifact = compact.get("artifact")
    if (
        info is not None
        and info.context == PAYLOAD_CONTEXT
        and compact["type"] == "tool"
        and isinstance(artifact, dict)
        and "payload" in artifact
        and compact["content"] == _payload_json(artifact["payload"])
    ):
        del compact["content"]
    return compact


def _content_from_artifact(messages: Any) -> Any:
    """The content a payload left out of a tool message (see :func:`_compact_message`)."""
    if not isinstance(messages, list):
        return messages
    return [
        {**m, "content": _payload_json(m["artifact"]["payload"])}
        if isinstance(m, dict)
        and "content" not in m
        and m.get("type") == "tool"
        and isinstance(m.get("artifact"), dict)
        and "payload" in m["artifact"]
        else m
        for m in messages
    ]


#: LangChain messages as payloads carry them (see :func:`_compact_message`).
Messages = Annotated[
    list[AnyMessage],
    BeforeValidator(_content_from_artifact),
    PlainSerializer(
        lambda messages, info: [_compact_message(m, info) for m in messages], when_used="json"
    ),
]
CompactAIMessage = Annotated[AIMessage, PlainSerializer(_compact_message, when_used="json")]


def text_of(message: BaseMessage) -> str:
    """A message's text: its content, or the text parts of a content list."""
    if isinstance(message.content, str):
        return message.content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in message.content
    )
