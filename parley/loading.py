"""Loading configured code by reference (``PARLEY_TOOLS``, ``PARLEY_MODEL``): worker side."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


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
