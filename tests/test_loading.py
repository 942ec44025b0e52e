"""Loading what the worker is configured with: toolsets (PARLEY_TOOLS), policies, and
chat models (PARLEY_MODEL), each factory handed its own narrow config, never the
worker's Settings, by what it declares and never by its signature. Bad configuration is
a clear ValueError, never a traceback from deep inside."""

from __future__ import annotations

import ast
import importlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from parley.activities.models import build_chat_model
from parley.activities.models.script_file import ScriptFileChatModel
from parley.activities.models.scripted import ScriptedChatModel
from parley.config.settings import Settings
from parley.contracts.errors import ModelRequestError
from parley.tools import ParleyTool, ToolRegistry, load_registry
from parley.tools.loading import (
    ModelAccess,
    ModelConfig,
    PlansConfig,
    ToolsetContext,
    factory,
)
from tests.support import drop_tables, read_records, write_record

TOOLS_SPEC = "tests.test_loading:sample_toolset,tests.test_loading:sample_factory"


def sample_toolset() -> list:
    return [write_record, ParleyTool(read_records, "auto")]


sample_factory = [ParleyTool(drop_tables, "deny")]


not_tools = ["write_record"]


def fake_model() -> FakeListChatModel:
    return FakeListChatModel(responses=["hi"])


def test_toolsets_load_with_policies_and_bare_tools_need_confirmation() -> None:
    registry = load_registry(TOOLS_SPEC)
    policies = {spec.name: spec.policy for spec in registry.catalogue().tools}
    assert policies == {"write_record": "confirm", "read_records": "auto", "drop_tables": "deny"}
    schema = registry.catalogue().get("write_record").args_schema
    assert set(schema["properties"]) == {"title"}  # the injected context is not the model's


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-colon", "not of the form module:attr"),
        ("nosuchmodule_xyz:tools", "cannot import nosuchmodule_xyz"),
        ("tests.test_loading:missing", "has no 'missing'"),
        ("tests.test_loading:sample_toolset,tests.test_loading:sample_toolset", "two tools"),
        # attributes that are not toolsets: refused at load time, never a TypeError
        ("os:sep", "'os:sep' is a str, not a toolset; a toolset is a list of tools"),
        ("json:loads", "loads needs arguments; a toolset is a list of tools"),
        ("os:environ", "is a _Environ, not a toolset"),
        ("tests.test_loading:fake_model", "is a FakeListChatModel, not a toolset"),
        ("tests.test_loading:not_tools", "holds a str, not a tool"),
    ],
)
def test_bad_toolset_specs_are_clear_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_registry(spec)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy 'sometimes'"):
        ParleyTool(write_record, "sometimes")  # type: ignore[arg-type]


def test_model_specs(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "one"}, {"content": "two"}]))
    assert isinstance(build_chat_model("scripted"), ScriptedChatModel)
    assert isinstance(build_chat_model(f"script:{script}"), ScriptFileChatModel)
    assert isinstance(build_chat_model("tests.test_loading:fake_model"), FakeListChatModel)
    for bad, message in [
        ("gpt-4", "not understood"),
        ("tests.test_loading:nothing", "cannot load"),
        ("tests.test_loading:sample_toolset", "not a chat model"),
        (f"script:{tmp_path / 'absent.json'}", "cannot read"),
        ("os:sep", "os:sep is not a zero-argument callable; a model factory is"),
        ("json:loads", "json:loads is not a zero-argument callable; a model factory is"),
        ("os:getcwd", "returned a str, not a chat model; a model factory is"),
    ]:
        with pytest.raises(ValueError, match=message):
            build_chat_model(bad)


def test_script_file_returns_entry_n_for_n_assistant_messages(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": "", "tool_calls": [{"name": "t", "args": {"a": 1}, "id": "x"}]},
                {"content": "done"},
            ]
        )
    )
    model = build_chat_model(f"script:{script}")
    first = model.invoke([HumanMessage("go")])
    assert first.tool_calls == [{"name": "t", "args": {"a": 1}, "id": "x", "type": "tool_call"}]
    history = [HumanMessage("go"), first, ToolMessage("ok", tool_call_id="x")]
    assert model.invoke(history).content == "done"
    assert model.invoke(history).content == "done"  # a retried call gets the same entry
    with pytest.raises(ModelRequestError, match="has 2 messages"):
        model.invoke([*history, AIMessage("done"), HumanMessage("more")])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "is not JSON"),
        ('{"a": 1}', "JSON list"),
        ('[{"tool_calls": [{}]}]', "malformed"),
    ],
)
def test_malformed_scripts_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    script = tmp_path / "script.json"
    script.write_text(text)
    with pytest.raises(ValueError, match=message):
        build_chat_model(f"script:{script}")


def test_scripted_model_answers_only_with_tools_it_has() -> None:
    model = ScriptedChatModel().bind_tools(ToolRegistry(sample_toolset()).langchain_tools())
    reply = model.invoke([HumanMessage("list the repositories of project demo")])
    assert reply.tool_calls == []
    assert "no git_list_project_repositories tool" in reply.content
    assert "I understand" in model.invoke([HumanMessage("what's up?")]).content


@pytest.mark.parametrize(
    ("request_text", "name", "args"),
    [
        (
            "list the repositories of project demo",
            "git_list_project_repositories",
            {"project": "demo"},
        ),
        (
            "prepare a fix branch Login-Bug in api",
            "git_prepare_worktree",
            {
                "project": "demo",
                "repo_alias": "api",
                "branch_kind": "fix",
                "branch_slug": "Login-Bug",
            },
        ),
        (
            'please prepare a feature worktree "my change" for project demo',
            "git_prepare_worktree",
            {
                "project": "demo",
                "repo_alias": "web",
                "branch_kind": "feat",
                "branch_slug": "my change",
            },
        ),
        (
            "push feat/x to web",
            "git_push_branch",
            {"project": "demo", "repo_alias": "web", "branch": "feat/x"},
        ),
        (
            "帮我创建一个计划，标题是季度复盘",
            "create_plan",
            {"title": "帮我创建一个计划，标题是季度复盘"},
        ),
        ("list my plans", "list_plans", {}),
        ("show plan 3", "get_plan", {"plan_id": 3}),
        ("mark plan 3 as done", "update_plan_status", {"plan_id": 3, "status": "done"}),
    ],
)
def test_scripted_model_reads_requests(
    tmp_path: Path, request_text: str, name: str, args: dict
) -> None:
    from parley.activities.toolsets.git import build_git_toolset, create_demo_projects
    from parley.activities.toolsets.plans import build_plans_toolset

    tools = [
        *build_git_toolset(create_demo_projects(tmp_path)),
        *build_plans_toolset("http://127.0.0.1:9", "unused-key"),
    ]
    model = ScriptedChatModel().bind_tools([t.tool for t in tools])
    (proposed,) = model.invoke([HumanMessage(request_text)]).tool_calls
    assert (proposed["name"], proposed["args"]) == (name, args)


def test_each_shipped_toolset_gets_its_own_config_made_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``parley dev`` hands the worker a Settings (nothing rewrites os.environ); the
    loader makes each shipped toolset's own config from it."""
    from parley.activities.toolsets.git import create_demo_projects

    monkeypatch.delenv("PARLEY_PLANS_API_KEY", raising=False)
    monkeypatch.delenv("PARLEY_GIT_PROJECTS", raising=False)
    settings = Settings(
        plans_api_key="k",
        plans_url="http://127.0.0.1:1",
        git_projects=str(create_demo_projects(tmp_path)),
    )
    registry = load_registry(
        "parley.activities.toolsets.plans:toolset,parley.activities.toolsets.git:toolset",
        settings=settings,
    )
    names = {spec.name for spec in registry.catalogue().tools}
    assert {"create_plan", "git_push_branch"} <= names
    with pytest.raises(ValueError, match="PARLEY_PLANS_API_KEY is not set"):
        load_registry("parley.activities.toolsets.plans:toolset", settings=Settings())


#: What the factories below were handed (read through ``handed()``: the loader imports
#: this file as ``tests.test_loading``, which need not be the module pytest runs).
HANDED: dict[str, object] = {}


def handed(what: str) -> object:
    return importlib.import_module("tests.test_loading").HANDED[what]


ALL_SECRETS = Settings(
    link_secret="link-secret-0123456789abcdef0123456789",
    plans_api_key="plans-key-0123",
    openai_api_key="sk-openai-0123",
    aws_secret_access_key="aws-secret-0123",
)


@factory(ToolsetContext, env_prefix="ACME_")
def acme_toolset(context: ToolsetContext) -> list:
    HANDED["toolset"] = context
    return [write_record]


def settings_toolset(settings: Settings) -> list:  # asks for the Settings by name
    return []


def lenient_toolset(settings: Settings | None = None) -> list:
    """Could take the Settings, but declares nothing: it is called with nothing."""
    HANDED["lenient"] = settings
    return [write_record]


def broken_toolset() -> list:
    return [len(5)]  # type: ignore[arg-type]  # its own bug, not a protocol error


@factory(ModelConfig)
def configured_model(config: ModelConfig) -> FakeListChatModel:
    HANDED["model"] = config
    return FakeListChatModel(responses=["hi"])


@factory(ModelConfig)
def model_as_toolset(config: ModelConfig) -> list:
    return []


def test_a_toolset_of_ones_own_gets_its_prefix_and_the_http_client_never_the_settings() -> None:
    client = object()
    environ = {
        "ACME_URL": "http://acme.example",
        "ACME_API_KEY": "acme-key-0123",
        "PARLEY_LINK_SECRET": "link-secret-0123456789abcdef0123456789",
        "OPENAI_API_KEY": "sk-openai-0123",
        "HOME": "/root",
    }
    registry = load_registry(
        "tests.test_loading:acme_toolset",
        settings=ALL_SECRETS,
        http_client=client,  # type: ignore[arg-type]
        environ=environ,
    )
    assert registry.names() == ["write_record"]
    context = handed("toolset")
    assert isinstance(context, ToolsetContext) and context.http_client is client
    assert dict(context.env) == {"ACME_URL": "http://acme.example", "ACME_API_KEY": "acme-key-0123"}
    assert "acme-key" not in repr(context)
    with pytest.raises(TypeError):  # read-only: it cannot be used to pass anything back
        context.env["ACME_URL"] = "x"  # type: ignore[index]


def test_a_model_factory_gets_the_models_config_and_nothing_else() -> None:
    build_chat_model("tests.test_loading:configured_model", ModelAccess.from_settings(ALL_SECRETS))
    config = handed("model")
    assert config == ModelConfig("", api_key="sk-openai-0123", base_url=None, timeout_seconds=120)
    assert "sk-openai" not in repr(config)


@pytest.mark.parametrize(
    ("load", "message"),
    [
        (
            lambda: load_registry("tests.test_loading:settings_toolset", settings=ALL_SECRETS),
            r"settings_toolset needs arguments; .* never f\(settings\)",
        ),
        (
            lambda: load_registry("tests.test_loading:model_as_toolset", settings=ALL_SECRETS),
            "model_as_toolset takes a ModelConfig; this factory may take nothing or one of",
        ),
        (
            lambda: build_chat_model(
                "tests.test_loading:acme_toolset", ModelAccess.from_settings(ALL_SECRETS)
            ),
            "acme_toolset takes a ToolsetContext; this factory may take nothing or one of",
        ),
        (lambda: factory(ToolsetContext, env_prefix="PARLEY_ACME_"), "Parley's own PARLEY_"),
        (lambda: factory(ToolsetContext, env_prefix="OPENAI_"), "Parley's own OPENAI_"),
        (lambda: factory(ToolsetContext, env_prefix="acme"), "ending in '_'"),
        (lambda: factory(PlansConfig, env_prefix="ACME_"), "for ToolsetContext only"),
        (lambda: factory(Settings), "a factory takes PlansConfig"),
    ],
)
def test_a_factory_that_asks_for_more_than_its_own_is_a_clear_error(
    load: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load()


def test_an_endless_toolset_is_refused_not_loaded_for_ever() -> None:
    with pytest.raises(ValueError, match="more than 1000 tools"):
        load_registry("itertools:count")


def test_an_undeclared_factory_is_called_with_nothing_whatever_its_signature() -> None:
    registry = load_registry("tests.test_loading:lenient_toolset", settings=ALL_SECRETS)
    assert registry.names() == ["write_record"]
    assert handed("lenient") is None  # the default, never the worker's Settings


def test_a_factorys_own_type_error_is_its_own_not_a_protocol_error() -> None:
    with pytest.raises(TypeError, match="has no len"):
        load_registry("tests.test_loading:broken_toolset", settings=ALL_SECRETS)


def test_a_declared_factory_needs_the_entry_points_settings() -> None:
    with pytest.raises(ValueError, match="takes a ModelConfig, made from the worker's Settings"):
        build_chat_model("tests.test_loading:configured_model")
    with pytest.raises(ValueError, match="needs the models' keys"):
        build_chat_model("openai:gpt-test")


def test_each_model_gets_its_own_providers_key_and_no_repr_shows_one() -> None:
    settings = Settings(
        openai_api_key="sk-openai-0123",
        anthropic_api_key="sk-ant-0123",
        anthropic_base_url="http://127.0.0.1:9",
        google_api_key="g-key-0123",
        model_timeout_seconds=7,
    )
    access = ModelAccess.from_settings(settings)
    assert access.config("c", "anthropic") == ModelConfig(
        "c", api_key="sk-ant-0123", base_url="http://127.0.0.1:9", timeout_seconds=7
    )
    assert access.config("g", "google").api_key == "g-key-0123"
    assert access.config("gpt").api_key == "sk-openai-0123"  # OpenAI-compatible by default
    assert not any(key in repr(access) for key in ("sk-openai", "sk-ant", "g-key"))


def test_no_activity_module_imports_the_configuration() -> None:
    """Activities get narrow configs from the worker (and their defaults and options
    from the contracts); ``Settings`` is read at the entry points (worker, gateway, CLI)
    only."""
    root = Path(__file__).resolve().parent.parent / "activities"
    importers = sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("parley.config"))
        or (
            isinstance(node, ast.Import)
            and any(alias.name.startswith("parley.config") for alias in node.names)
        )
    )
    assert importers == []
