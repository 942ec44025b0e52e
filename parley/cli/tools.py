"""``parley tools``: the worker's tools, subagents, policy rules and the agent's
instructions. Client side; it loads the toolsets and reads the instructions as the
worker would, and needs no server.
"""

from __future__ import annotations

import json
import os

from rich.text import Text

from parley.cli.app import AsJson, fail, out, settings
from parley.cli.dev_state import running_dev
from parley.cli.rendering import print_catalogue
from parley.tools import load_registry
from parley.tools.instructions import AgentSetup
from parley.worker.wiring import load_judges


def tools(as_json: AsJson = False) -> None:
    """List the worker's tools (PARLEY_TOOLS) with their policies, previews (an MCP
    tool's names its read tool) and inverses, the policy file's subagents with the
    tools each may use, and its rules (PARLEY_POLICIES) in the order they are tried. No
    server needed. Beside a running `parley dev` (the one at TEMPORAL_ADDRESS), its
    worker's settings fill in those the environment does not set."""
    config = settings()
    dev = running_dev(config)
    if dev is not None:
        config = dev.apply_to(config, os.environ)
    try:
        registry = load_registry(config.tools, settings=config, environ=os.environ)
        load_judges(registry, config)  # each rule's judge_model loads, as on the worker
    except ValueError as problem:
        raise fail(str(problem)) from None
    catalogue = registry.catalogue()
    agent = registry.agent
    previews_with = {t.name: t.preview_with for t in registry.tools() if t.preview_with}
    if as_json:
        described = catalogue.model_dump(mode="json")
        for tool in described["tools"]:  # has_preview and has_inverse are the spec's
            tool["preview_with"] = previews_with.get(tool["name"])
        described["instructions"] = {
            **(agent.instructions.model_dump(mode="json") if agent.instructions else {}),
            "source": agent.source or None,
            "allow_added": agent.allow_added,
        }
        print(json.dumps(described, indent=2))
        return
    if dev is not None:
        out.print(
            Text(
                f"the worker of the parley dev at {config.temporal_address} (data {dev.data_dir}):",
                style="dim",
            )
        )
    usable = {
        subagent.name: [name for name in registry.names() if subagent.allows(name)]
        for subagent in catalogue.subagents
    }
    print_instructions(agent)
    print_catalogue(
        catalogue,
        out,
        subagent_tools=usable,
        policies_file=config.policies_file,
        previews_with=previews_with,
    )


def print_instructions(agent: AgentSetup) -> None:
    """The agent's instructions: name, hash, where they come from, the text whole."""
    added = (
        "a conversation may add to them at its start (PARLEY_ALLOW_ADDED_INSTRUCTIONS)"
        if agent.allow_added
        else "a conversation may not add to them (PARLEY_ALLOW_ADDED_INSTRUCTIONS is off)"
    )
    if agent.instructions is None:
        out.print(
            Text(
                "no instructions (PARLEY_INSTRUCTIONS unset, no [agent] in the policy file): "
                "the model gets no system message; " + added
            )
        )
        return
    out.print(
        Text.assemble(
            ("instructions ", "bold"), agent.instructions.label(), f" from {agent.source}"
        )
    )
    for line in agent.instructions.text.strip("\n").splitlines():
        out.print(Text(f"    {line}"), soft_wrap=True)
    out.print(Text(added, style="dim"))
