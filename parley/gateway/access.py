"""Who is calling: bearer tokens mapped to user ids. Client side (the gateway).

The tokens file (``PARLEY_GATEWAY_TOKENS_FILE``) has one ``<user id> <token>`` per line;
blank lines and ``#`` comments are skipped. ``parley dev`` writes one for its user.
Tokens are compared in constant time; a request's user id comes only from its token.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from pathlib import Path

from parley.contracts import check_user_id

#: Shorter tokens are refused: they could be guessed.
MIN_TOKEN_CHARS = 16


class TokenTable:
    def __init__(self, tokens: Mapping[str, str]) -> None:
        """``tokens`` maps each token to its user id."""
        for token, user_id in tokens.items():
            check_user_id(user_id)
            if user_id.startswith("group:"):  # a reviewer group's name, never a user's
                raise ValueError(f"user id {user_id!r}: 'group:' names a group of reviewers")
            if len(token) < MIN_TOKEN_CHARS:
                raise ValueError(
                    f"the token of user {user_id!r} is shorter than {MIN_TOKEN_CHARS} "
                    "characters; make one with `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(24))'`"
                )
        self._tokens = dict(tokens)

    @classmethod
    def from_file(cls, path: str | Path) -> TokenTable:
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise ValueError(f"cannot read the tokens file {path}: {err.strerror}") from None
        tokens: dict[str, str] = {}
        for number, line in enumerate(lines, start=1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split()
            if len(parts) != 2:
                raise ValueError(
                    f"{path}:{number}: expected '<user id> <token>', found {len(parts)} field(s)"
                )
            user_id, token = parts
            if token in tokens:
                raise ValueError(f"{path}:{number}: this token is already given to a user")
            tokens[token] = user_id
        try:
            return cls(tokens)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None

    def user_for(self, token: str) -> str | None:
        """The user id of ``token``, or None. Every token is compared (constant time)."""
        found = None
        for known, user_id in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = user_id
        return found

    def token_of(self, user_id: str) -> str | None:
        """A token of ``user_id``, if the table has one."""
        return next((t for t, user in self._tokens.items() if user == user_id), None)

    def secrets(self) -> list[str]:
        """The tokens themselves, for the process's redaction (``observability.redaction``)."""
        return list(self._tokens)

    def __repr__(self) -> str:  # the user ids, never a token
        return f"TokenTable(users={sorted(set(self._tokens.values()))!r})"

    def __len__(self) -> int:
        return len(self._tokens)


def new_token() -> str:
    return secrets.token_urlsafe(24)


def write_tokens_file(path: Path, user_id: str) -> str:
    """Create (or keep) a tokens file with a token for ``user_id``; return the token."""
    if path.exists() and (token := TokenTable.from_file(path).token_of(user_id)):
        return token
    token = new_token()
    path.write_text(f"# Parley gateway tokens: <user id> <token>\n{user_id} {token}\n")
    path.chmod(0o600)
    return token
