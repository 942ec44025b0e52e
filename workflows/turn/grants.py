"""Grants: the conversation's remembered decisions (``ConversationState.remembered``),
their one writer. Workflow side (deterministic: ``workflow.now()`` for time; nothing
here issues a command but the ``grants-recorded`` patch marker).

A decision with ``remember`` becomes a grant (:meth:`Grants.remember`) that records
what it was given for (``parley.contracts.grants``): the tool's spec hash, the policy
file's version, the MCP server's ``name@version`` and its lifetime. ``triage`` applies
it to a later call of its shape only while all of them still hold; when one no longer
does, the call waits for a decision, saying why, and the grant is forgotten here,
audited ``grant_lapsed`` (:meth:`Grants.lapse`); so is one an edit meets (the edit runs
as its editor's approval, ``decisions``). A member revokes one by the call it
was given on (``revoke_grant``; :meth:`Grants.revoke`), audited ``grant_revoked``.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from parley.contracts import Decision, PendingCall, RememberedDecision, ToolCall, call_shape
from parley.contracts.errors import InvalidDecision
from parley.contracts.grants import Lapse, RevokeGrantInput, lifetime, rules_version, spec_hash
from parley.workflows.context import Records, View

#: How many remembered decisions a conversation keeps (the oldest go first).
REMEMBERED_KEPT = 64
#: The patch under which a grant records what it was given for and its lifetime;
#: histories recorded before it remember decisions as they did (for good).
GRANTS_RECORDED = "grants-recorded"


class Grants:
    """The one writer of ``ConversationState.remembered``; ``view`` is read only."""

    def __init__(self, view: View, records: Records) -> None:
        self._state, self._view, self._ledger = view.state, view, records.ledger

    def remember(self, call: PendingCall, decision: Decision, decided_by: str) -> None:
        """Later calls of this shape take this decision without asking, while what it
        was given for holds (bounded: the oldest go)."""
        remembered = RememberedDecision(
            shape=call_shape(call.name, call.args),
            policy="auto" if decision.action == "approve" else "deny",
            decided_by=decided_by,
            tool_call_id=call.tool_call_id,
        )
        detail: dict[str, object] = {"policy": remembered.policy}
        if workflow.patched(GRANTS_RECORDED):
            remembered = self._recorded(remembered, call, decision)
            if remembered.expires_at is not None:
                detail["expires_at"] = remembered.expires_at.isoformat()
        kept = [r for r in self._state.remembered if r.shape != remembered.shape]
        self._state.remembered = [*kept, remembered][-REMEMBERED_KEPT:]
        self._ledger.audit("remembered", decided_by, call.tool_call_id, call.name, detail)

    def _recorded(
        self, remembered: RememberedDecision, call: PendingCall, decision: Decision
    ) -> RememberedDecision:
        """``remembered`` with what it is given for, and until when."""
        catalogue = self._view.catalogue()
        spec = catalogue.get(call.name)
        now = workflow.now()
        seconds = lifetime(decision.remember_seconds, catalogue.grants)
        return remembered.model_copy(
            update={
                "tool": call.name,
                "spec_hash": spec_hash(spec) if spec is not None else None,
                "policy_version": rules_version(catalogue.rules),
                "server": spec.server if spec is not None else None,
                "granted_at": now,
                "expires_at": now + timedelta(seconds=seconds) if seconds else None,
            }
        )

    def lapse(self, grant: RememberedDecision, lapse: Lapse, call: ToolCall) -> None:
        """``grant`` no longer holds (``lapse``): forgotten, audited ``grant_lapsed`` on
        the call that asked again."""
        self._state.remembered = [
            r for r in self._state.remembered if r.tool_call_id != grant.tool_call_id
        ]
        detail = {"grant": grant.tool_call_id, "cause": lapse.cause, "why": lapse.why}
        self._ledger.audit("grant_lapsed", "parley", call.tool_call_id, call.name, detail)

    def check(self, request: RevokeGrantInput) -> RememberedDecision:
        """The grant ``request`` names, or a refusal saying how to find one."""
        grant = next(
            (r for r in self._state.remembered if r.tool_call_id == request.grant_id), None
        )
        if grant is None:
            known = ", ".join(r.tool_call_id for r in self._state.remembered) or "none"
            raise InvalidDecision(
                f"no remembered decision {request.grant_id!r} in this conversation (its "
                f"grants: {known}); `parley grants --session <id>` lists them"
            )
        return grant

    def revoke(self, request: RevokeGrantInput) -> RememberedDecision:
        """Forget the grant: the next call of its shape asks again. Audited."""
        grant = self.check(request)
        self._state.remembered = [r for r in self._state.remembered if r is not grant]
        detail = {"grant": grant.tool_call_id, "policy": grant.policy, "shape": grant.shape}
        self._ledger.audit("grant_revoked", request.user_id, grant.tool_call_id, grant.tool, detail)
        return grant
