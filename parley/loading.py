"""Loading what the worker is configured with: code by reference (``PARLEY_TOOLS``,
``PARLEY_MODEL``) and configuration files (``PARLEY_POLICIES``, ``PARLEY_MCP_SERVERS``,
``script:<file>``). Worker side."""

from __future__ import annotations

import inspect
import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

#: How each kind of configuration file is parsed, and what its parser raises.
_FORMATS: dict[str, tuple[Callable[[str], Any], type[Exception]]] = {
    "JSON": (json.loads, json.JSONDecodeError),
    "TOML": (tomllib.loads, tomllib.TOMLDecodeError),
}


def read_config_file(path: str | Path, setting: str, kind: Literal["JSON", "TOML"]) -> Any:
    """The parsed content of a configuration file, or one ``ValueError`` that names the
    setting and the file: it cannot be read, or it is not ``kind``."""
    file = Path(path)
    parse, malformed = _FORMATS[kind]
    try:
        return parse(file.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{setting}: cannot read {file}: {err.strerror}") from None
    except malformed as err:
        raise ValueError(f"{setting}: {file} is not {kind}: {err}") from None


def takes_no_arguments(function: Callable[..., Any]) -> bool:
    """Whether ``function()`` is a valid call, so a factory can be told apart from a
    function that wants arguments before anything is called."""
    try:
        inspect.signature(function).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (some builtins): let the call decide
        return True
    return True


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` declares a parameter ``name`` that can be passed by keyword
    (a toolset factory's ``http_client``: the worker's one HTTP client)."""
    try:
        parameter = inspect.signature(function).parameters.get(name)
    except ValueError:
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def wants_settings(function: Callable[..., Any]) -> bool:
    """Whether ``function`` is a factory of the form ``f(settings)``: a parameter named
    ``settings`` and nothing else it needs (a factory gets the worker's Settings)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except ValueError:
        return False
    return (
        bool(parameters)
        and parameters[0].name == "settings"
        and all(p.default is not inspect.Parameter.empty for p in parameters[1:])
    )
