"""Configuration read at the entry points: ``settings`` (every ``PARLEY_*`` variable and
activity timeout) and ``temporal`` (how to reach the cluster, as the ``temporal`` CLI
reads it). Client and worker side; nothing in ``workflows/`` imports it."""
