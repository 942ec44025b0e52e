"""Who may do what, and what a proposed call deserves: ``gate`` (the checks validators
and handlers make), ``membership`` (users and groups), ``awaiting`` (who a call waits
for) and ``triage`` (one proposal's verdict under the policy). Workflow side, pure."""
