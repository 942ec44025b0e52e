"""``parley store``: the payload store's statistics and retention (``gc``). Client side:
it lists and deletes stored objects (``parley.storage.retention``) and asks Temporal
which conversations still need them, and whose part of the store is its own (its
cluster's and namespace's); it needs no worker.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from rich.text import Text

from parley.cli.app import AsJson, out, run_async, settings
from parley.client import connect
from parley.storage import store_of
from parley.storage.base import Tally
from parley.storage.retention import GcReport, StoreStats, collect_garbage, store_stats

store_app = typer.Typer(
    help="The payload store (PARLEY_PAYLOAD_STORE): statistics and retention.",
    no_args_is_help=True,
)


@store_app.command()
def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be deleted; delete nothing.")
    ] = False,
    retention: Annotated[
        float | None,
        typer.Option(
            help="Seconds a closed conversation's payloads are kept "
            "[PARLEY_STORE_RETENTION_SECONDS; default: the namespace's retention].",
            min=0,
        ),
    ] = None,
    legacy: Annotated[
        bool,
        typer.Option(
            "--legacy",
            help="Also collect what was written before the store kept a part per cluster "
            "and namespace, as this cluster's (refused while another cluster has a part "
            "of the store: then delete it by hand once no conversation started before "
            "then is open; local: the two-hex folders, refs/, referrers/ and collected/ "
            "at the top; S3: <prefix>v0/ and <prefix>collected/).",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Delete the stored payloads and transcripts of conversations closed longer than
    the retention period, and print what was deleted. Nothing an open conversation, or
    one closed inside retention, can read is deleted; only this cluster's and
    namespace's part of the store is looked at (the others are counted apart)."""
    config = settings()
    seconds = retention if retention is not None else config.store_retention_seconds

    async def work() -> GcReport:
        client = await connect(config)
        store = store_of(client.data_converter)
        try:
            return await collect_garbage(
                store,
                client,
                now=datetime.now(UTC),
                retention=timedelta(seconds=seconds) if seconds is not None else None,
                dry_run=dry_run,
                legacy=legacy,
            )
        finally:
            await store.aclose()

    report = run_async(work)
    if as_json:
        print(json.dumps(report.summary(), indent=2))
        return
    verb = "would delete" if dry_run else "deleted"
    for stored in report.deleted:
        owners = ", ".join(sorted(r.workflow_id for r in stored.referrers))
        out.print(Text(f"{verb} {stored.key} ({stored.size} bytes; {owners})"))
    out.print(
        Text(
            f"{verb} {len(report.deleted)} object(s), {report.deleted_bytes} bytes, of "
            f"{len(report.conversations)} conversation(s) closed over "
            f"{_duration(report.retention)} ago; kept {report.kept_objects} object(s), "
            f"{report.kept_bytes} bytes"
        )
    )
    if report.elsewhere:
        out.print(Text(f"untouched: {_elsewhere(report.elsewhere)}"))


@store_app.command()
def stats(as_json: AsJson = False) -> None:
    """Print this cluster's and namespace's part of the store: its objects, bytes and
    oldest entry; and the other parts' apart."""
    config = settings()

    async def work() -> tuple[str, StoreStats]:
        client = await connect(config)  # whose part is ours: the cluster says
        store = store_of(client.data_converter)
        try:
            await store.bind(client)
            return store.location(), await store_stats(store)
        finally:
            await store.aclose()

    location, found = run_async(work)
    if as_json:
        print(json.dumps({"store": location, **found.summary()}, indent=2))
        return
    oldest = found.oldest.isoformat(timespec="seconds") if found.oldest else "none"
    out.print(Text(f"store {location}"))
    out.print(
        Text(
            f"{found.objects} object(s), {found.bytes} bytes, oldest {oldest}; "
            f"{found.conversations} conversation(s) refer to them, {found.unclaimed} "
            "object(s) stored for none (never collected)"
        )
    )
    if found.elsewhere:
        out.print(Text(f"not counted: {_elsewhere(found.elsewhere)}"))


def _elsewhere(parts: list[Tally]) -> str:
    """The other parts of the store, in one line."""
    said = []
    for part in parts:
        if not part.segment:
            whose = "written before the store kept a part per cluster (whose, none can tell)"
        elif part.cluster_id is not None:
            at = f" at {part.address}" if part.address else ""
            whose = f"cluster {part.cluster_id}{at}, namespace {part.namespace}"
        else:
            whose = f"part {part.segment}"
        said.append(f"{whose}: {part.objects} object(s), {part.bytes} bytes")
    return "; ".join(said)


def _duration(span: timedelta) -> str:
    seconds = span.total_seconds()
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g} day(s)"
    return f"{seconds:g} s"
