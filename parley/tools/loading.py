"""Loading what the worker is configured with: code by reference (``PARLEY_TOOLS``,
``PARLEY_MODEL``), the one config each factory is handed, and configuration files
(``PARLEY_POLICIES``, ``PARLEY_MCP_SERVERS``, ``script:<file>``). Worker side.

One factory protocol, for toolsets and models alike: a factory is a callable that
takes nothing, or takes the one config it declares with ``@factory(Config)``. The loader
decides what to hand it from that declaration alone (it never reads a signature: an
undeclared factory is called with nothing, and one that wants arguments is refused by
the call itself). The configs are made from the Settings the entry point read
(:meth:`FactoryInputs.from_settings`):

- ``PlansConfig``: ``PARLEY_PLANS_URL``, ``PARLEY_PLANS_API_KEY`` and the worker's HTTP
  client (the plans toolset);
- ``GitConfig``: ``PARLEY_GIT_PROJECTS``, ``PARLEY_GIT_WORKTREES`` (the git toolset);
- ``McpConfig``: ``PARLEY_MCP_SERVERS`` (the MCP toolset);
- ``ModelConfig`` (model factories only): the model's name, its provider's
  ``<PROVIDER>_BASE_URL`` and ``<PROVIDER>_API_KEY`` (``OPENAI_`` for a factory),
  ``PARLEY_MODEL_TIMEOUT_SECONDS``; made from :class:`ModelAccess`, the models' part of
  the Settings, which is all ``build_chat_model`` is handed;
- ``ToolsetContext``, for a toolset of your own: the worker's HTTP client and the
  environment's variables under the factory's own prefix
  (``@factory(ToolsetContext, env_prefix="ACME_")``), which may not be one of Parley's
  (``PARLEY_``, ``OPENAI_``, ``ANTHROPIC_``, ``GOOGLE_``, ``AWS_``, ``TEMPORAL_``,
  ``OTEL_``).

No factory is handed the worker's whole Settings: the link secret, the gateway's tokens,
the store's keys and the other toolsets' keys stay with the worker. That is least
privilege against accidents (a factory that logs, keeps or sends on what it is given),
not a sandbox: code in the worker's process can read the process's environment.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from parley.config.settings import Settings

if TYPE_CHECKING:
    import httpx

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


# --- the configs factories are handed ------------------------------------------------


@dataclass(frozen=True)
class PlansConfig:
    """The plans toolset's: the service's URL and API key, and the worker's HTTP client."""

    url: str
    api_key: str = field(repr=False)
    http_client: httpx.AsyncClient | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_settings(
        cls, settings: Settings, http_client: httpx.AsyncClient | None = None
    ) -> PlansConfig:
        return cls(settings.plans_url, settings.plans_api_key, http_client)


@dataclass(frozen=True)
class GitConfig:
    """The git toolset's: the project registry file, and where worktrees go."""

    projects: Path | None = None
    worktrees: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> GitConfig:
        return cls(
            Path(settings.git_projects) if settings.git_projects else None,
            Path(settings.git_worktrees) if settings.git_worktrees else None,
        )


@dataclass(frozen=True)
class McpConfig:
    """The MCP toolset's: the JSON file of MCP server connections."""

    servers: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> McpConfig:
        return cls(settings.mcp_servers)


@dataclass(frozen=True)
class ModelConfig:
    """A chat model's: its name (``openai:<name>``; empty for a ``module:factory``), the
    provider's server URL and key (``provider``: OpenAI-compatible unless ``anthropic`` or
    ``google``), and how long one request may take."""

    name: str
    api_key: str = field(default="", repr=False)
    base_url: str | None = None
    timeout_seconds: float = 120.0

    @classmethod
    def from_settings(
        cls, settings: Settings, name: str = "", provider: str = "openai"
    ) -> ModelConfig:
        return ModelAccess.from_settings(settings).config(name, provider)


@dataclass(frozen=True)
class ModelAccess:
    """The models' part of the worker's Settings: each provider's key and server
    (``<PROVIDER>_API_KEY`` / ``<PROVIDER>_BASE_URL``) and how long one request may take.
    What ``build_chat_model`` is handed; each model gets only its own provider's part
    (:meth:`config`)."""

    openai: tuple[str, str | None] = field(default=("", None), repr=False)
    anthropic: tuple[str, str | None] = field(default=("", None), repr=False)
    google: tuple[str, str | None] = field(default=("", None), repr=False)
    timeout_seconds: float = 120.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelAccess:
        return cls(
            openai=(settings.openai_api_key, settings.openai_base_url),
            anthropic=(settings.anthropic_api_key, settings.anthropic_base_url),
            google=(settings.google_api_key, settings.google_base_url),
            timeout_seconds=settings.model_timeout_seconds,
        )

    def config(self, name: str = "", provider: str = "openai") -> ModelConfig:
        """The config of model ``name`` of ``provider`` (OpenAI-compatible unless
        ``anthropic`` or ``google``)."""
        api_key, base_url = {"anthropic": self.anthropic, "google": self.google}.get(
            provider, self.openai
        )
        return ModelConfig(
            name, api_key=api_key, base_url=base_url, timeout_seconds=self.timeout_seconds
        )


@dataclass(frozen=True)
class ToolsetContext:
    """A toolset of your own's: the worker's HTTP client (None: make your own), and the
    environment's variables whose names start with the factory's ``env_prefix``, as
    they are named (``{"ACME_URL": ...}``; empty without a prefix)."""

    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    http_client: httpx.AsyncClient | None = field(default=None, repr=False, compare=False)


#: The configs a toolset factory may declare, and a model factory.
TOOLSET_CONFIGS: tuple[type, ...] = (PlansConfig, GitConfig, McpConfig, ToolsetContext)
MODEL_CONFIGS: tuple[type, ...] = (ModelConfig,)
#: Prefixes of the variables Parley reads itself: no toolset's ``env_prefix`` covers them.
RESERVED_PREFIXES = ("PARLEY_", "OPENAI_", "ANTHROPIC_", "GOOGLE_", "AWS_", "TEMPORAL_", "OTEL_")
_PREFIX = re.compile(r"^[A-Z][A-Z0-9_]*_$")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Declared:
    """What ``@factory`` marks a factory with: the config it takes."""

    config: type
    env_prefix: str | None = None


def factory(config: type, *, env_prefix: str | None = None) -> Callable[[F], F]:
    """Mark a toolset or model factory as taking ``config`` (one of this module's
    configs); ``env_prefix`` (``ToolsetContext`` only) names the variables it reads."""
    if config not in (*TOOLSET_CONFIGS, *MODEL_CONFIGS):
        raise ValueError(f"@factory({getattr(config, '__name__', config)!r}): {FACTORY_CONFIGS}")
    if env_prefix is not None:
        if config is not ToolsetContext:
            raise ValueError(f"@factory({config.__name__}): env_prefix is for ToolsetContext only")
        _check_prefix(env_prefix)

    def mark(function: F) -> F:
        function.__parley_factory__ = Declared(config, env_prefix)  # type: ignore[attr-defined]
        return function

    return mark


FACTORY_CONFIGS = (
    "a factory takes PlansConfig, GitConfig, McpConfig, ToolsetContext or ModelConfig "
    "(parley.tools.loading)"
)


def _check_prefix(prefix: str) -> None:
    if not _PREFIX.match(prefix):
        raise ValueError(
            f"env_prefix {prefix!r} must be upper-case letters, digits and '_', ending "
            "in '_', e.g. 'ACME_'"
        )
    for reserved in RESERVED_PREFIXES:
        if prefix.startswith(reserved) or reserved.startswith(prefix):
            raise ValueError(
                f"env_prefix {prefix!r} would read Parley's own {reserved}* variables "
                "(its secrets among them); choose a prefix of the toolset's own, e.g. 'ACME_'"
            )


@dataclass(frozen=True)
class FactoryInputs:
    """What the loader makes a factory's config from, each part already narrow (None:
    the entry point gave no Settings). The loader's own: never handed on whole."""

    plans: PlansConfig | None = None
    git: GitConfig | None = None
    mcp: McpConfig | None = None
    models: ModelAccess | None = None
    http_client: httpx.AsyncClient | None = field(default=None, repr=False, compare=False)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None,
        http_client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> FactoryInputs:
        """The inputs an entry point hands the loader: the configs made from its
        ``settings``, its HTTP client and its environment (for ``ToolsetContext``)."""
        if settings is None:
            return cls(http_client=http_client, environ=environ or {})
        return cls(
            plans=PlansConfig.from_settings(settings, http_client),
            git=GitConfig.from_settings(settings),
            mcp=McpConfig.from_settings(settings),
            models=ModelAccess.from_settings(settings),
            http_client=http_client,
            environ=environ or {},
        )


def call_factory(
    function: Callable[..., Any],
    inputs: FactoryInputs,
    *,
    what: str,
    allowed: tuple[type, ...],
    refused: str,
) -> Any:
    """``function(config)`` for a factory marked ``@factory(Config)`` (``Config`` one of
    ``allowed``), else ``function()``: the declaration alone decides, no signature is
    read. ``what`` names the setting in an error; ``refused`` is the error for a
    callable that wants arguments it was not declared to take."""
    name = getattr(function, "__name__", type(function).__name__)
    declared = getattr(function, "__parley_factory__", None)
    if isinstance(declared, Declared):
        if declared.config not in allowed:
            kinds = ", ".join(kind.__name__ for kind in allowed)
            raise ValueError(
                f"{what}: {name} takes a {declared.config.__name__}; this factory may take "
                f"nothing or one of {kinds}"
            )
        return function(_config(declared, inputs, what, name))
    try:
        return function()
    except TypeError as err:
        if not _raised_by_the_call(err):
            raise  # the factory's own code failed: its error, as it is
        raise ValueError(f"{what}: {refused}") from None


def _config(declared: Declared, inputs: FactoryInputs, what: str, name: str) -> Any:
    if declared.config is ToolsetContext:
        prefix = declared.env_prefix
        env = {k: v for k, v in inputs.environ.items() if prefix and k.startswith(prefix)}
        return ToolsetContext(env=MappingProxyType(env), http_client=inputs.http_client)
    made: dict[type, object | None] = {
        PlansConfig: inputs.plans,
        GitConfig: inputs.git,
        McpConfig: inputs.mcp,
        ModelConfig: inputs.models.config() if inputs.models is not None else None,
    }
    config = made[declared.config]
    if config is None:  # the entry points always pass the Settings they read
        raise ValueError(
            f"{what}: {name} takes a {declared.config.__name__}, made from the worker's "
            "Settings, and none were passed (the worker, CLI and gateway read them at start)"
        )
    return config


def _raised_by_the_call(err: TypeError) -> bool:
    """Whether ``err`` came from calling the factory with no arguments (it wants some),
    not from inside its body: then its traceback ends in the caller's own frame."""
    return err.__traceback__ is not None and err.__traceback__.tb_next is None
