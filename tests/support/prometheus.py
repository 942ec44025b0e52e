"""Reading a Prometheus text exposition (a worker's or a gateway's ``/metrics``) in the
tests. Client side."""

from __future__ import annotations

import re


def metric_value(metrics: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` (or ``name_total``) whose labels include
    ``labels``."""
    total = 0.0
    for line in metrics.splitlines():
        match = re.match(rf"^{name}(?:_total)?(\{{[^}}]*\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total
