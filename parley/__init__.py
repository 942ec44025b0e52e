"""Parley: LLM-agent conversations as durable Temporal workflows.

Exports nothing on purpose: the workflow sandbox imports ``parley.contracts`` (and so
this package) on every workflow task, so importing ``parley`` must stay free of the
client, the worker and their dependencies. Import from the modules:
``parley.client.Conversations``, ``parley.tools.auto``/``confirm``/``deny``,
``parley.config.settings.Settings``, ``parley.worker.wiring.build_worker``.
"""
