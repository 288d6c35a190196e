"""Signed tokens (bus/trust/tokens.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from bus.core.errors import BadInput, Unauthorized
from bus.trust import tokens
from bus.trust.tokens import (
    SCOPE_READ,
    SCOPE_THREAD,
    SCOPE_WRITE,
    Authenticator,
    issue,
    require,
    verify,
)

SECRET = "s3cret-for-tests"
NOW = 1_700_000_000


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _signed(payload: object, secret: str = SECRET) -> str:
    """A token with a valid signature over an arbitrary payload (as if the secret leaked)."""
    body = _b64(json.dumps(payload).encode())
    sig = hmac.new(secret.encode(), f"inb1.{body}".encode(), hashlib.sha256).digest()
    return f"inb1.{body}.{_b64(sig)}"


def _code(exc_info: pytest.ExceptionInfo[BaseException]) -> str:
    return getattr(exc_info.value, "code", "")


def test_round_trip_session() -> None:
    token = issue(SECRET, session="sess-1", scopes=[SCOPE_READ, SCOPE_WRITE], ttl_s=60, now=NOW)
    assert token.startswith("inb1.") and token.count(".") == 2
    claims = verify(SECRET, token, now=NOW + 59)
    assert claims.sub_kind == "session"
    assert claims.sub == "sess-1"
    assert claims.actor == "session:sess-1"
    assert claims.scopes == frozenset({SCOPE_READ, SCOPE_WRITE})
    assert (claims.iat, claims.exp) == (NOW, NOW + 60)
    assert claims.jti


def test_round_trip_member_without_expiry() -> None:
    token = issue(SECRET, member="acme/dean@example.com", scopes={SCOPE_THREAD}, now=NOW)
    claims = verify(SECRET, token, now=NOW + 10**9)
    assert claims.sub_kind == "member"
    assert claims.actor == "member:acme/dean@example.com"
    assert claims.exp is None


def test_each_token_has_its_own_id() -> None:
    a = verify(SECRET, issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW), now=NOW)
    b = verify(SECRET, issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW), now=NOW)
    assert a.jti != b.jti


def test_forged_payload_fails_signature() -> None:
    token = issue(SECRET, session="victim", scopes=[SCOPE_READ], now=NOW)
    prefix, _, sig = token.split(".")
    forged_payload = {
        "k": "session",
        "sub": "victim",
        "scp": sorted(tokens.SCOPES),
        "iat": NOW,
        "exp": None,
        "jti": "x",
    }
    forged = f"{prefix}.{_b64(json.dumps(forged_payload).encode())}.{sig}"
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, forged, now=NOW)
    assert _code(ei) == "token_bad_signature"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # last signature char
        lambda t: t.rsplit(".", 1)[0] + ".AAAA",  # short signature
        lambda t: t.rsplit(".", 1)[0] + "." + t.rsplit(".", 1)[1] + "A",  # extra char
    ],
)
def test_tampered_signature(mutate) -> None:
    token = issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW)
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, mutate(token), now=NOW)
    assert _code(ei) == "token_bad_signature"


def test_wrong_secret() -> None:
    token = issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW)
    with pytest.raises(Unauthorized) as ei:
        verify("another-secret", token, now=NOW)
    assert _code(ei) == "token_bad_signature"


@pytest.mark.parametrize("offset", [60, 61, 10**6])
def test_expired(offset: int) -> None:
    token = issue(SECRET, session="s", scopes=[SCOPE_READ], ttl_s=60, now=NOW)
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, token, now=NOW + offset)
    assert _code(ei) == "token_expired"


def test_revoked_via_callback() -> None:
    token = issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW)
    jti = verify(SECRET, token, now=NOW).jti
    revoked = {jti}
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, token, now=NOW, is_revoked=revoked.__contains__)
    assert _code(ei) == "token_revoked"
    other = issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW)
    verify(SECRET, other, now=NOW, is_revoked=revoked.__contains__)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "inb1",
        "inb1.",
        "inb1..",
        "inb1.abc",
        "inb1.abc.def.ghi",
        "inb2.abc.def",
        "INB1.abc.def",
        "Bearer inb1.abc.def",
        "inb1.a b.def",
        "inb1.abc=.def",
        "inb1.abc.de+f",
        "inb1.abc.de/f",
        "inb1.ab\u00e9.def",
        "inb1.abc.def\n",
        "x" * 5000,
        "inb1." + "a" * 5000 + ".b",
    ],
)
def test_malformed_strings(garbage: str) -> None:
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, garbage, now=NOW)
    assert _code(ei) == "token_malformed"


@pytest.mark.parametrize("value", [None, 123, b"inb1.a.b"])
def test_non_string_token_is_malformed(value: object) -> None:
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, value, now=NOW)  # type: ignore[arg-type]
    assert _code(ei) == "token_malformed"


def test_well_formed_but_unsigned_is_bad_signature() -> None:
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, "inb1.abc.def", now=NOW)
    assert _code(ei) == "token_bad_signature"


GOOD = {"k": "session", "sub": "s", "scp": [SCOPE_READ], "iat": NOW, "exp": None, "jti": "j"}


@pytest.mark.parametrize(
    "payload",
    [
        "a string",
        [1, 2],
        {**GOOD, "k": "admin"},
        {**GOOD, "sub": "bad sid with spaces"},
        {**GOOD, "k": "member", "sub": "no-slash"},
        {**GOOD, "scp": ["agent:everything"]},
        {**GOOD, "scp": SCOPE_READ},
        {**GOOD, "iat": "now"},
        {**GOOD, "iat": True},
        {**GOOD, "exp": 1.5},
        {**GOOD, "jti": ""},
        {k: v for k, v in GOOD.items() if k != "jti"},
    ],
)
def test_signed_but_invalid_payload_is_malformed(payload: object) -> None:
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, _signed(payload), now=NOW)
    assert _code(ei) == "token_malformed"


def test_signed_non_json_payload_is_malformed() -> None:
    body = _b64(b"\xff\xfenot json")
    sig = hmac.new(SECRET.encode(), f"inb1.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(Unauthorized) as ei:
        verify(SECRET, f"inb1.{body}.{_b64(sig)}", now=NOW)
    assert _code(ei) == "token_malformed"


@pytest.mark.parametrize(
    "kwargs, code",
    [
        ({"session": "s", "scopes": ["agent:inbox:admin"]}, "token_scope"),
        ({"session": "s", "scopes": []}, "token_scope"),
        ({"session": "s", "scopes": SCOPE_READ}, "token_scope"),
        ({"scopes": [SCOPE_READ]}, "token_subject"),
        ({"session": "s", "member": "w/n", "scopes": [SCOPE_READ]}, "token_subject"),
        ({"session": "has space", "scopes": [SCOPE_READ]}, "token_subject"),
        ({"session": "../etc", "scopes": [SCOPE_READ]}, "token_subject"),
        ({"member": "noworkspace", "scopes": [SCOPE_READ]}, "token_subject"),
        ({"member": "w/a/b", "scopes": [SCOPE_READ]}, "token_subject"),
        ({"session": "s", "scopes": [SCOPE_READ], "ttl_s": 0}, "token_ttl"),
        ({"session": "s", "scopes": [SCOPE_READ], "ttl_s": -5}, "token_ttl"),
    ],
)
def test_issue_refuses(kwargs: dict, code: str) -> None:
    with pytest.raises(BadInput) as ei:
        issue(SECRET, now=NOW, **kwargs)
    assert _code(ei) == code


@pytest.mark.parametrize("secret", ["", None])
def test_empty_secret_refused(secret: object) -> None:
    with pytest.raises(BadInput):
        issue(secret, session="s", scopes=[SCOPE_READ])  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        verify(secret, "inb1.a.b")  # type: ignore[arg-type]


def test_require_scope() -> None:
    claims = verify(SECRET, issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW), now=NOW)
    require(claims, SCOPE_READ)
    require(claims, SCOPE_READ, session="s")
    for missing in (SCOPE_WRITE, SCOPE_THREAD):
        with pytest.raises(Unauthorized) as ei:
            require(claims, missing)
        assert _code(ei) == "token_scope"


def test_require_unknown_scope_is_a_caller_bug() -> None:
    claims = verify(SECRET, issue(SECRET, session="s", scopes=[SCOPE_READ], now=NOW), now=NOW)
    with pytest.raises(BadInput):
        require(claims, "agent:inbox:raed")


def test_token_for_one_session_cannot_act_for_another() -> None:
    token = issue(SECRET, session="session-x", scopes=sorted(tokens.SCOPES), now=NOW)
    claims = verify(SECRET, token, now=NOW)
    with pytest.raises(Unauthorized) as ei:
        require(claims, SCOPE_READ, session="session-y")
    assert _code(ei) == "token_subject"


def test_member_token_is_not_bound_to_a_session() -> None:
    claims = verify(
        SECRET, issue(SECRET, member="acme/dean", scopes=[SCOPE_THREAD], now=NOW), now=NOW
    )
    require(claims, SCOPE_THREAD, session="any-session")
    with pytest.raises(Unauthorized) as ei:
        require(claims, SCOPE_WRITE, session="any-session")
    assert _code(ei) == "token_scope"


def test_authenticator_disabled_returns_none() -> None:
    a = Authenticator()
    assert not a.enabled
    assert a.actor_for_write(None, SCOPE_WRITE, session="s") is None
    assert a.actor_for_write("garbage", SCOPE_WRITE) is None


def test_authenticator_empty_secret_is_refused() -> None:
    with pytest.raises(BadInput):
        Authenticator(secret="")


def test_authenticator_enabled() -> None:
    revoked: set[str] = set()
    a = Authenticator(secret=SECRET, is_revoked=revoked.__contains__)
    assert a.enabled
    token = issue(SECRET, session="s", scopes=[SCOPE_WRITE])
    claims = a.actor_for_write(token, SCOPE_WRITE, session="s")
    assert claims is not None and claims.actor == "session:s"

    cases = [
        (None, SCOPE_WRITE, "s", "token_missing"),
        ("", SCOPE_WRITE, "s", "token_missing"),
        ("junk", SCOPE_WRITE, "s", "token_malformed"),
        (token, SCOPE_THREAD, "s", "token_scope"),
        (token, SCOPE_WRITE, "other", "token_subject"),
        (
            issue("other-secret", session="s", scopes=[SCOPE_WRITE]),
            SCOPE_WRITE,
            "s",
            "token_bad_signature",
        ),
        (
            issue(SECRET, session="s", scopes=[SCOPE_WRITE], ttl_s=1, now=NOW),
            SCOPE_WRITE,
            "s",
            "token_expired",
        ),
    ]
    for tok, scope, session, code in cases:
        with pytest.raises(Unauthorized) as ei:
            a.actor_for_write(tok, scope, session=session)
        assert _code(ei) == code, (tok, scope, session)

    revoked.add(claims.jti)
    with pytest.raises(Unauthorized) as ei:
        a.actor_for_write(token, SCOPE_WRITE, session="s")
    assert _code(ei) == "token_revoked"
