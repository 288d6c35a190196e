"""Signed tokens: who is writing, and what they may do.

A token is ``inb1.<payload>.<signature>``: the payload is base64url JSON naming a subject
(a session or a member), its scopes, an issue time, an optional expiry and a random id
(``jti``, so one token can be revoked); the signature is HMAC-SHA256 under the server
secret over ``"inb1." + payload``. Only the stdlib is used, so there is no JWT algorithm
negotiation to get wrong: the algorithm is fixed by the version prefix.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from bus.core.errors import BadInput, Unauthorized
from bus.core.models import SESSION_ID_PATTERN

PREFIX = "inb1"
SCOPE_READ = "agent:inbox:read"
SCOPE_WRITE = "agent:inbox:write"
SCOPE_THREAD = "agent:thread:write"
SCOPES: frozenset[str] = frozenset({SCOPE_READ, SCOPE_WRITE, SCOPE_THREAD})
# The web inbox's operator pages: only an operator token carries it, and it opens no API.
SCOPE_OPERATOR = "inbox:operator"
ALL_SCOPES: frozenset[str] = SCOPES | {SCOPE_OPERATOR}

SubKind = Literal["session", "member", "operator"]

# A member is ``<workspace>/<name>``; names may be e-mail-like, hence ``@`` and ``+``.
MEMBER_PATTERN = r"^[A-Za-z0-9._-]{1,100}/[A-Za-z0-9._@+-]{1,180}$"
_MEMBER_RE = re.compile(MEMBER_PATTERN)
OPERATOR_PATTERN = r"^[A-Za-z0-9._@+-]{1,100}$"
_OPERATOR_RE = re.compile(OPERATOR_PATTERN)
_PATTERNS = {"session": SESSION_ID_PATTERN, "member": MEMBER_PATTERN, "operator": OPERATOR_PATTERN}
_SESSION_RE = re.compile(SESSION_ID_PATTERN)
_B64URL_RE = re.compile(r"^[A-Za-z0-9_-]+$")
# Bounds the work done on attacker-supplied strings before the signature is checked.
MAX_TOKEN_CHARS = 4096


def _never_revoked(jti: str) -> bool:
    return False


def _always_current(claims: Claims) -> bool:
    return True


@dataclass(frozen=True)
class Claims:
    """What a verified token says: its subject, scopes, times and id."""

    sub_kind: SubKind
    sub: str
    scopes: frozenset[str]
    iat: int
    exp: int | None
    jti: str
    # A member token's generation: the member's removals when it was issued (see
    # bus.services.items.member_remove); 0 for every other token.
    gen: int = 0

    @property
    def actor(self) -> str:
        """The subject as one string: ``session:<sid>``, ``member:<workspace>/<name>`` or
        ``operator:<name>``."""
        return f"{self.sub_kind}:{self.sub}"


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: str, payload_b64: str) -> str:
    mac = hmac.new(
        secret.encode("utf-8"), f"{PREFIX}.{payload_b64}".encode("ascii"), hashlib.sha256
    )
    return _b64encode(mac.digest())


def _check_secret(secret: object) -> str:
    if not isinstance(secret, str) or not secret:
        raise BadInput("a token secret must be a non-empty string", code="secret_empty")
    return secret


def _valid_subject(kind: str, sub: object) -> bool:
    if not isinstance(sub, str):
        return False
    pattern = {"session": _SESSION_RE, "member": _MEMBER_RE, "operator": _OPERATOR_RE}.get(kind)
    return pattern is not None and pattern.fullmatch(sub) is not None


def issue(
    secret: str,
    *,
    session: str | None = None,
    member: str | None = None,
    scopes: Iterable[str],
    ttl_s: int | None = None,
    now: int | None = None,
    operator: str | None = None,
    gen: int = 0,
) -> str:
    """Return a token for exactly one of ``session``, ``member`` or ``operator``.

    An operator token carries exactly :data:`SCOPE_OPERATOR` (the web inbox's operator
    pages) and no other token may.

    ``ttl_s`` (seconds) sets an expiry; without it the token lasts until revoked.
    ``gen`` is a member token's generation (the member's removals so far).
    Raises :class:`BadInput` for an empty secret, an unknown scope or a bad subject.
    """
    _check_secret(secret)
    named = (("session", session), ("member", member), ("operator", operator))
    given = [(k, v) for k, v in named if v is not None]
    if len(given) != 1:
        raise BadInput(
            "a token names exactly one of session, member or operator", code="token_subject"
        )
    kind: SubKind = given[0][0]  # type: ignore[assignment]
    sub = given[0][1]
    if not _valid_subject(kind, sub):
        pattern = _PATTERNS[kind]
        raise BadInput(f"invalid {kind} {sub!r:.60}: must match {pattern}", code="token_subject")
    # A bare string is iterable too; "agent:inbox:read" would become its characters.
    if isinstance(scopes, str):
        raise BadInput("scopes must be a list of scope names, not one string", code="token_scope")
    scope_set = frozenset(scopes)
    unknown = sorted(repr(s) for s in scope_set if s not in ALL_SCOPES)
    if unknown:
        raise BadInput(
            f"unknown scope(s) {', '.join(unknown)}; known: {sorted(ALL_SCOPES)}",
            code="token_scope",
        )
    if not scope_set:
        raise BadInput("a token needs at least one scope", code="token_scope")
    if (kind == "operator" and scope_set != {SCOPE_OPERATOR}) or (
        kind != "operator" and SCOPE_OPERATOR in scope_set
    ):
        raise BadInput(
            f"an operator token carries exactly {SCOPE_OPERATOR}, and only an operator token does",
            code="token_scope",
        )
    if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0):
        raise BadInput(
            f"ttl_s must be a positive number of seconds, got {ttl_s!r}", code="token_ttl"
        )
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise BadInput(f"gen must be a count of 0 or more, got {gen!r}", code="token_gen")
    iat = int(time.time()) if now is None else int(now)
    payload: dict[str, Any] = {
        "k": kind,
        "sub": sub,
        "scp": sorted(scope_set),
        "iat": iat,
        "exp": None if ttl_s is None else iat + ttl_s,
        "jti": secrets.token_urlsafe(16),
    }
    if gen:
        payload["g"] = gen
    payload_b64 = _b64encode(
        json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")
    )
    return f"{PREFIX}.{payload_b64}.{_sign(secret, payload_b64)}"


def _malformed(why: str) -> Unauthorized:
    return Unauthorized(f"malformed token: {why}", code="token_malformed")


def _claims_from(payload: Any) -> Claims:
    if not isinstance(payload, dict):
        raise _malformed("payload is not an object")
    kind, sub, scp = payload.get("k"), payload.get("sub"), payload.get("scp")
    iat, exp, jti = payload.get("iat"), payload.get("exp"), payload.get("jti")
    if kind not in ("session", "member", "operator") or not _valid_subject(kind, sub):
        raise _malformed("bad subject")
    if not isinstance(scp, list) or not all(isinstance(s, str) and s in ALL_SCOPES for s in scp):
        raise _malformed("bad scopes")
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise _malformed("bad issue time")
    if exp is not None and (not isinstance(exp, int) or isinstance(exp, bool)):
        raise _malformed("bad expiry")
    if not isinstance(jti, str) or not jti:
        raise _malformed("bad token id")
    gen = payload.get("g", 0)
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        raise _malformed("bad generation")
    assert isinstance(sub, str)  # checked by _valid_subject; narrows the type
    return Claims(sub_kind=kind, sub=sub, scopes=frozenset(scp), iat=iat, exp=exp, jti=jti, gen=gen)


def verify(
    secret: str,
    token: str,
    *,
    now: int | None = None,
    is_revoked: Callable[[str], bool] = _never_revoked,
    is_current: Callable[[Claims], bool] = _always_current,
) -> Claims:
    """Check ``token``'s signature, expiry and revocation and return its claims.

    ``is_current`` says whether the claims' subject still stands behind them (a member
    token of an older generation does not). Raises :class:`Unauthorized` with code
    ``token_malformed``, ``token_bad_signature``, ``token_expired`` or ``token_revoked``.
    """
    _check_secret(secret)
    if not isinstance(token, str) or not token:
        raise _malformed("empty")
    if len(token) > MAX_TOKEN_CHARS:
        raise _malformed("too long")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise _malformed(f"expected {PREFIX}.<payload>.<signature>")
    _, payload_b64, sig = parts
    if not _B64URL_RE.fullmatch(payload_b64) or not _B64URL_RE.fullmatch(sig):
        raise _malformed("not base64url")
    # Compare the canonical encodings, so a re-padded or re-cased signature cannot pass,
    # and in constant time. The payload is not parsed until it is known to be ours.
    if not hmac.compare_digest(sig.encode("ascii"), _sign(secret, payload_b64).encode("ascii")):
        raise Unauthorized("token signature does not match", code="token_bad_signature")
    try:
        payload = json.loads(_b64decode(payload_b64))
    except (binascii.Error, ValueError) as exc:
        raise _malformed("payload is not JSON") from exc
    claims = _claims_from(payload)
    current = int(time.time()) if now is None else int(now)
    if claims.exp is not None and current >= claims.exp:
        raise Unauthorized("token has expired", code="token_expired", exp=claims.exp)
    if is_revoked(claims.jti):
        raise Unauthorized("token has been revoked", code="token_revoked")
    if not is_current(claims):
        raise Unauthorized(
            f"token has been revoked: {claims.actor} was removed after it was issued",
            code="token_revoked",
        )
    return claims


def missing_token(scope: str, session: str | None = None) -> str:
    """The refusal of a call without a token while a secret is set: how to get one."""
    what = "read" if scope.endswith(":read") else "write"
    return (
        f"a token is required for this {what} (INBOX_SECRET is set): issue one with "
        f"`inbox token issue --session {session or 'SID'} --scopes {scope}` and pass it in "
        "INBOX_TOKEN"
    )


def require(claims: Claims, scope: str, *, session: str | None = None) -> None:
    """Refuse unless ``claims`` carries ``scope`` and, for a session token, is ``session``'s.

    A session token works only on its own session (``token_subject`` otherwise). A member
    token is not bound to any session, so ``session`` does not restrict it; whether the
    member may act on that session's items is the caller's check (workspace membership).
    """
    if scope not in ALL_SCOPES:
        # A typo in the caller must not silently become "nobody has this scope".
        raise BadInput(f"unknown scope {scope!r}", code="token_scope")
    if scope not in claims.scopes:
        raise Unauthorized(f"token lacks scope {scope}", code="token_scope", scope=scope)
    if session is not None and claims.sub_kind == "session" and claims.sub != session:
        raise Unauthorized(
            f"token is for session {claims.sub}, not {session}", code="token_subject"
        )


@dataclass
class Authenticator:
    """Checks the tokens of writes when a secret is configured; lets them through when not.

    With no secret the bus is in local single-user mode and writes are unverified.
    """

    secret: str | None = None
    is_revoked: Callable[[str], bool] = field(default=_never_revoked)
    is_current: Callable[[Claims], bool] = field(default=_always_current)

    def __post_init__(self) -> None:
        # Settings turn an empty INBOX_SECRET into None; an empty string reaching here is a
        # wiring bug, and treating it as "auth off" would fail open.
        if self.secret is not None:
            _check_secret(self.secret)

    @property
    def enabled(self) -> bool:
        """Whether tokens are checked at all."""
        return self.secret is not None

    def actor_for_write(
        self, token: str | None, scope: str, *, session: str | None = None
    ) -> Claims | None:
        """Return the verified claims for a write, or ``None`` when auth is off.

        With a secret configured a missing token raises ``token_missing``, and an invalid
        one raises the code from :func:`verify` or :func:`require`.
        """
        if self.secret is None:
            return None
        if not token:
            raise Unauthorized(missing_token(scope, session), code="token_missing")
        claims = self.verify(token)
        require(claims, scope, session=session)
        return claims

    def verify(self, token: str) -> Claims:
        """:func:`verify` under this authenticator's secret, revocations and generations."""
        if self.secret is None:
            raise BadInput("tokens need INBOX_SECRET on the server", code="no_secret")
        return verify(self.secret, token, is_revoked=self.is_revoked, is_current=self.is_current)
