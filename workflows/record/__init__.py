"""What a conversation records, and the one owner of each record: the ``ledger``
(transcript, answers, audit), ``pending`` calls, the AG-UI ``events`` log, ``dedup``
(results by update id), ``publishing`` (what the Temporal UI shows), ``metrics`` and the
``audit_archive``. Workflow side."""
