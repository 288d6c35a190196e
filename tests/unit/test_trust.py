"""Pure trust rules (bus/trust/rules.py, bus/surfaces/http/front_door.py) and label rendering properties."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.core.notices import ThreadSummary, render_notice
from bus.core.stamp import render_stamp
from bus.core.text import is_format_char, one_line, sanitize_label, strip_format
from bus.surfaces.http.front_door import Rule, refusal, rule_for
from bus.trust.rules import (
    allowed_hosts,
    handle_problem,
    host_allowed,
    is_loopback,
    join_refusal,
    origin_allowed,
    wake_argv,
    wake_env,
)

# -- labels ---------------------------------------------------------------------------------

FORMAT_TABLE = [
    ("rlo", "ha:\u202eecila", "ha:ecila"),
    ("zero width space", "ha:al\u200bice", "ha:alice"),
    ("zero width joiner", "ha:al\u200dice", "ha:alice"),
    ("bom", "\ufeffha:alice", "ha:alice"),
    ("tag characters", "ha:alice\U000e0041\U000e0042", "ha:alice"),
    ("isolates", "\u2066ha:alice\u2069", "ha:alice"),
    ("arabic letter mark", "ha:\u061calice", "ha:alice"),
    ("plain", "ha:alice", "ha:alice"),
]


@pytest.mark.parametrize(("name", "raw", "clean"), FORMAT_TABLE, ids=[r[0] for r in FORMAT_TABLE])
def test_labels_lose_format_characters(name: str, raw: str, clean: str) -> None:
    assert strip_format(raw) == clean
    assert sanitize_label(raw) == clean
    assert one_line(raw) == clean


HANDLE_TABLE = [
    ("latin", "ha:alice", None),
    ("cyrillic a in host", "h\u0430:alice", "mixes scripts"),
    ("cyrillic a in name", "ha:\u0430lice", "mixes scripts"),
    # One script per part is not enough: the whole handle reads as one name.
    ("all cyrillic part", "\u0445\u0430:alice", "mixes scripts"),
    ("cyrillic host, digits", "\u04bb1:alice", "mixes scripts"),
    ("all cyrillic", "\u0445\u0430:\u0430\u0440\u0435", None),
    ("latin host, japanese name", "h1:\u65e5\u672c\u3054", None),
    ("latin host, korean name", "h1:\ud55c\uad6d", None),
    ("latin host, greek name", "h1:\u03b1\u03b2", "mixes scripts"),
    ("comma", "h1:mallory,operator:root", "separators"),
    ("middle dot", "h1:a\u00b7b", "separators"),
    ("low quotation mark", "h1:mallory\u201aoperator", "separators"),
    ("digits and dots", "host-1.x:run_2", None),
    ("zero width", "ha:al\u200bice", "format"),
    ("rlo", "ha:\u202ealice", "format"),
    ("greek omicron", "ha:b\u03bfb", "mixes scripts"),
]


@pytest.mark.parametrize(("name", "handle", "why"), HANDLE_TABLE, ids=[r[0] for r in HANDLE_TABLE])
def test_handle_problem(name: str, handle: str, why: str | None) -> None:
    got = handle_problem(handle)
    assert (got is None) == (why is None)
    if why:
        assert got is not None and why in got


labels = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Z", "Cf", "Cc", "Mn")),
    max_size=60,
)


def _has_format(text: str) -> bool:
    return any(is_format_char(ch) or unicodedata.category(ch) == "Cc" for ch in text)


@settings(max_examples=300, deadline=None)
@given(sender=labels, text=st.text(max_size=200))
def test_a_stamp_has_one_header_and_no_format_character_in_it(sender: str, text: str) -> None:
    out = render_stamp({"from": sender, "text": text, "ts": 1790283480000, "verified": False})
    lines = out.split("\n")
    header = lines[0]
    assert header.startswith("[inbox from ") and header.endswith("]")
    assert not _has_format(header)
    assert "unverified" in header
    # Every other line sits under the bar: nothing can pass for a second header.
    assert all(ln.startswith("  │") for ln in lines[1:])
    assert sum(1 for ln in lines if ln.startswith("[")) == 1


@settings(max_examples=300, deadline=None)
@given(senders=st.lists(labels, min_size=1, max_size=4), preview=labels, thread=labels)
def test_a_notice_has_one_header_and_no_format_character(
    senders: list[str], preview: str, thread: str
) -> None:
    summary = ThreadSummary(
        thread=thread, label=thread, count=1, senders=senders, newest_preview=preview
    )
    out = render_notice([summary], "s1")
    lines = out.split("\n")
    assert lines[0].startswith("[inbox ·")
    assert all(ln.startswith("  ") for ln in lines[1:])
    assert not any(_has_format(ln) for ln in lines)


def test_a_notice_marks_unverified_senders() -> None:
    summary = ThreadSummary(
        thread="thr_a", label="x", count=2, senders=["h:a", "h:b"], unverified=["h:b"]
    )
    line = render_notice([summary], "s1").split("\n")[1]
    assert "h:a (" not in line and "h:a, h:b unverified (2)" in line


# -- wake commands ----------------------------------------------------------------------------

WAKE_TABLE = [
    ("plain", "notify-agent --session s1", (["notify-agent", "--session", "s1"], False)),
    ("redirect needs a shell", "cat > /tmp/x", ("cat > /tmp/x", True)),
    ("pipe needs a shell", "a | b", ("a | b", True)),
    ("variable needs a shell", "echo $HOME", ("echo $HOME", True)),
    ("quoted needs a shell", "say 'hi there'", ("say 'hi there'", True)),
]


@pytest.mark.parametrize(("name", "cmd", "want"), WAKE_TABLE, ids=[r[0] for r in WAKE_TABLE])
def test_wake_argv(name: str, cmd: str, want: tuple[object, bool]) -> None:
    assert wake_argv(cmd) == want


def test_wake_env_drops_the_bus_secrets() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/h",
        "INBOX_SECRET": "s",
        "INBOX_TOKEN": "t",
        "INBOX_REDIS_URL": "redis://:pw@x",
        "INBOX_BROKER_URL": "redis://:pw@x",
        "INBOX_FLOWER_AUTH": "u:p",
        "INBOX_SOME_PASSWORD": "p",
        "INBOX_SESSION": "s1",
    }
    assert wake_env(env) == {"PATH": "/bin", "HOME": "/h", "INBOX_SESSION": "s1"}


# -- the gateway's Host, Origin and body rules -------------------------------------------------

HOST_TABLE = [
    ("loopback ip with port", "127.0.0.1:5252", (), True),
    ("localhost", "localhost:5252", (), True),
    ("ipv6 loopback", "[::1]:5252", (), True),
    ("rebinding name", "evil.example:5252", (), False),
    ("no host", None, (), False),
    ("configured name", "bus.internal:80", ("bus.internal",), True),
    ("configured list excludes loopback", "127.0.0.1:5252", ("bus.internal",), False),
    ("star allows any", "anything", ("*",), True),
]


@pytest.mark.parametrize(
    ("name", "header", "configured", "ok"), HOST_TABLE, ids=[r[0] for r in HOST_TABLE]
)
def test_host_allowed(name: str, header: str | None, configured: tuple[str, ...], ok: bool) -> None:
    assert host_allowed(header, allowed_hosts("127.0.0.1", configured)) is ok


ORIGIN_TABLE = [
    ("no origin (curl, prox)", None, "127.0.0.1:5252", True),
    ("same origin", "http://127.0.0.1:5252", "127.0.0.1:5252", True),
    ("cross site", "http://evil.example", "127.0.0.1:5252", False),
    ("other port", "http://127.0.0.1:8080", "127.0.0.1:5252", False),
    ("null origin", "null", "127.0.0.1:5252", False),
    ("odd scheme", "file://x", "127.0.0.1:5252", False),
]


@pytest.mark.parametrize(
    ("name", "origin", "host", "ok"), ORIGIN_TABLE, ids=[r[0] for r in ORIGIN_TABLE]
)
def test_origin_allowed(name: str, origin: str | None, host: str, ok: bool) -> None:
    assert origin_allowed(origin, host) is ok


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def _scope(method: str = "POST", path: str = "/v1/send", **headers: str) -> dict[str, object]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }


UI = Rule(prefix="/ui/", max_body=1 << 20, json_only=False)
REFUSAL_TABLE = [
    ("json ok", _scope(content_type="application/json", host="h"), None),
    ("json with charset", _scope(content_type="application/json; charset=utf-8"), None),
    ("no content type from a non-browser", _scope(), None),
    ("text/plain", _scope(content_type="text/plain"), 415),
    ("form", _scope(content_type="application/x-www-form-urlencoded"), 415),
    ("no content type from a page", _scope(origin="http://h", host="h"), 415),
    (
        "cross-site origin",
        _scope(content_type="application/json", origin="http://e", host="h"),
        403,
    ),
    ("sec-fetch-site", _scope(content_type="application/json", sec_fetch_site="cross-site"), 403),
    ("declared too large", _scope(content_type="application/json", content_length="70000"), 413),
    ("bad length", _scope(content_type="application/json", content_length="x"), 400),
    ("GET is not a body", _scope(method="GET", path="/health"), None),
    ("ui form post", _scope(path="/ui/login", content_type="multipart/form-data; b=x"), None),
    ("ui upload under its own cap", _scope(path="/ui/up", content_length="900000"), None),
]


@pytest.mark.parametrize(
    ("name", "scope", "status"), REFUSAL_TABLE, ids=[r[0] for r in REFUSAL_TABLE]
)
def test_refusal(name: str, scope: dict[str, object], status: int | None) -> None:
    why = refusal(scope, rule_for(str(scope["path"]), (UI,)))
    assert (why[0] if why else None) == status


ACME_DEAN = ("acme", "dean")
DEAN = ("member", "acme/dean")
OPERATOR = ("operator", "root")
JOIN_TABLE = [
    # name, prior, wanted, opener, auth, why
    ("no secret: anyone joins", None, ACME_DEAN, None, False, None),
    ("no secret: still fixed", ("beta", "erin"), ACME_DEAN, None, False, "workspace_fixed"),
    ("no token", None, ACME_DEAN, None, True, "token_missing"),
    ("no token, workspace-less session", (None, None), ACME_DEAN, None, True, "token_missing"),
    ("the session's own token", None, ACME_DEAN, ("session", "s"), True, "not_your_workspace"),
    ("the starter's token", None, ACME_DEAN, DEAN, True, None),
    ("another member", None, ACME_DEAN, ("member", "acme/mia"), True, "not_your_workspace"),
    ("another workspace's", None, ACME_DEAN, ("member", "beta/dean"), True, "not_your_workspace"),
    ("an operator", None, ACME_DEAN, OPERATOR, True, None),
    ("an operator moves it", ("beta", "erin"), ACME_DEAN, OPERATOR, True, None),
    ("the starter cannot move it", ("beta", "erin"), ACME_DEAN, DEAN, True, "workspace_fixed"),
    ("restart as registered", ACME_DEAN, ACME_DEAN, None, True, None),
    ("another starter", ACME_DEAN, ("acme", "mia"), None, True, "token_missing"),
    ("no workspace asked", None, (None, None), None, True, None),
    ("a member, no workspace", (None, None), (None, None), DEAN, True, "token_subject"),
    ("a member, no join", ACME_DEAN, ACME_DEAN, DEAN, True, "token_subject"),
]


@pytest.mark.parametrize(
    ("name", "prior", "wanted", "opener", "auth", "why"), JOIN_TABLE, ids=[r[0] for r in JOIN_TABLE]
)
def test_join_refusal(
    name: str,
    prior: tuple[str | None, str | None] | None,
    wanted: tuple[str | None, str | None],
    opener: tuple[str, str] | None,
    auth: bool,
    why: str | None,
) -> None:
    assert join_refusal(prior, wanted, opener, auth=auth) == why
