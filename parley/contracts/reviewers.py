"""Who a reviewer name stands for: a user's own name, and ``group:<name>`` for each of
their verified groups. Both sides of the Temporal boundary, no I/O: the workflow's
membership rules (``parley.workflows.rules.membership``) and the client's listing of
the conversations a user reviews (``parley.client.visibility``) read names the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

#: A reviewer group's name in a conversation's reviewers: ``group:<name>``.
GROUP_PREFIX = "group:"


def names_of(user_id: str, groups: Sequence[str]) -> set[str]:
    """The reviewer names that are ``user_id``: their own, and each group's."""
    return {user_id, *(f"{GROUP_PREFIX}{group}" for group in groups)}
