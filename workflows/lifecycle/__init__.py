"""A conversation's life between turns and across runs: the ``run_loop``, ``handover``
(continue-as-new and per-run limits), ``rewind``, ``deadlines`` (expiry), ``signalled``
decisions and ``followers``. Workflow side."""
