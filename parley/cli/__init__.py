"""The ``parley`` command line (the console script ``parley = "parley.cli:app"``). Client
side: it talks to conversations through ``parley.client`` and starts servers (``dev``,
``worker``); no workflow logic here.

Every command has ``--help``. Scriptable commands print JSON with ``--json``; a refused
command exits 1 with one clear line on stderr. ``TEMPORAL_ADDRESS`` and
``PARLEY_TASK_QUEUE`` pick the cluster and the worker.

The commands live by area: ``servers`` (dev, gateway, plans-service, worker, deploy),
``tools``, ``conversations`` (send, show, list, events, end, chat), ``inbox`` (inbox,
inbox approve|reject --like), ``decisions``
(approve, reject, respond, edit, undo, revert), ``results`` (result: one call's whole result) and
``audit`` (export, verify); what they share is
``parley.cli.app``. They are registered here, in the order ``parley --help`` lists them. Printing is
``parley.cli.rendering``; the interactive loop is ``parley.cli.chat``. ``forks`` (fork,
rewind), ``store`` (gc, stats) and ``policies`` (suggest) are registered here too, so
``parley.cli.app`` imports no command module.
"""

from __future__ import annotations

from parley.cli.app import app, fail, out, warn
from parley.cli.audit import audit
from parley.cli.conversations import chat, end, events, list_, send, show
from parley.cli.decisions import approve, edit, reject, respond, revert, undo
from parley.cli.forks import fork_, rewind_
from parley.cli.grants import grants_app
from parley.cli.inbox import inbox_app
from parley.cli.policies import policies_app
from parley.cli.results import result
from parley.cli.servers import deploy, dev, gateway, plans_service, worker
from parley.cli.store import store_app
from parley.cli.tools import tools

app.command()(dev)
app.command()(gateway)
app.command("plans-service")(plans_service)
app.command()(worker)
app.command()(deploy)
app.command()(tools)
app.command()(send)
app.command()(approve)
app.command()(reject)
app.command()(respond)
app.command()(edit)
app.command()(undo)
app.command()(revert)
app.add_typer(grants_app, name="grants")
app.command()(show)
app.command()(result)
app.command("list")(list_)
app.add_typer(inbox_app, name="inbox")
app.command()(events)
app.command()(end)
app.command()(audit)
app.command()(chat)
app.command("fork", rich_help_panel="Fork and rewind")(fork_)
app.command("rewind", rich_help_panel="Fork and rewind")(rewind_)
app.add_typer(store_app, name="store")
app.add_typer(policies_app, name="policies")

__all__ = ["app", "fail", "out", "warn"]
