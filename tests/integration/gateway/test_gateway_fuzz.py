"""Property: whatever body arrives, the gateway answers it without a 500."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.api import Bus
from tests.support.gateway_server import Server

FIELDS = [
    "from", "to", "to_id", "text", "class", "urgency", "kind", "thread", "pr", "topic",
    "from_session", "id", "ts", "v", "files", "verified", "wait",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
nasty_text = st.sampled_from(
    ["h:{x}", "a/b", "..", "", " ", "thr_", "thr_!!", "x" * 9000, "\u202e", "\x00", "h:\n", "{}"]
)
messages = st.dictionaries(
    st.sampled_from(FIELDS), json_values | nasty_text | st.just("s1"), min_size=1, max_size=8
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    messages.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 3000).map(lambda n: ("[" * n + "]" * n).encode()),
)


def test_random_bodies_never_get_a_500(bus: Bus, serve: Callable[..., Server]) -> None:
    bus.open_session("s1")
    gw = serve(bus).client

    @settings(
        max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(body=bodies, path=st.sampled_from(["/send", "/v1/send"]), typed=st.booleans())
    def check(body: bytes, path: str, typed: bool) -> None:
        headers: dict[str, Any] = {"content-type": "application/json"} if typed else {}
        r = gw.post(path, content=body, headers=headers)
        assert r.status_code < 500, (path, body[:200], r.text)
        answer = r.json()
        assert isinstance(answer, dict) and "ok" in answer

    check()
