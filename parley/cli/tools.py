"""``parley tools``: the worker's tools, subagents and policy rules. Client side; it
loads the toolsets as the worker would, and needs no server.
"""

from __future__ import annotations

import json

from parley.cli.app import AsJson, fail, out, settings
from parley.rendering import print_catalogue


def tools(as_json: AsJson = False) -> None:
    """List the worker's tools (PARLEY_TOOLS) with their policies, the policy file's
    subagents with the tools each may use, and its rules (PARLEY_POLICIES) in the
    order they are tried. No server needed."""
    from parley.tools import load_registry

    config = settings()
    try:
        registry = load_registry(config.tools, settings=config)
    except ValueError as problem:
        raise fail(str(problem)) from None
    catalogue = registry.catalogue()
    if as_json:
        print(json.dumps(catalogue.model_dump(mode="json"), indent=2))
        return
    usable = {
        subagent.name: [name for name in registry.names() if subagent.allows(name)]
        for subagent in catalogue.subagents
    }
    print_catalogue(catalogue, out, subagent_tools=usable, policies_file=config.policies_file)
