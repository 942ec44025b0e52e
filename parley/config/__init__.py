"""Configuration read at the entry points: ``settings`` (every ``PARLEY_*`` variable)
and ``temporal`` (how to reach the cluster, as the ``temporal`` CLI reads it). Client
and worker side, handed on narrow; nothing in ``workflows/`` or ``activities/`` imports
it (activity timeouts and retry policies are ``parley.contracts.activity_config``)."""
