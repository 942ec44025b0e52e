"""What a conversation records, and the one writer of each record: the ``ledger`` (answers,
audit, a message entering), the ``transcript``, ``pending`` calls, the AG-UI ``events``
log, ``dedup`` (results by update id, updates parked for a later turn), ``metrics`` (the
counters' ``Tally``), ``publishing`` (what the Temporal UI shows) and the
``audit_archive``. Workflow side."""
