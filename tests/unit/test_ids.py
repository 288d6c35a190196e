"""The session id rule (bus.core.lane_names.is_session_id, checked without ``re`` for the
drain's lane) and the pattern the models and their JSON Schemas carry say the same."""

from __future__ import annotations

import re

import pytest

from bus.core.errors import BadInput
from bus.core.ids import SESSION_ID_PATTERN, check_session_id
from bus.core.lane_names import is_session_id

SAMPLES = ["s1", "a.b_c-D9", "x" * 180, "x" * 181, "", ".", "..", "a/b", "a b", "é", "a\n", 7]


@pytest.mark.parametrize("sid", SAMPLES)
def test_the_rule_is_the_models_pattern(sid: object) -> None:
    by_pattern = isinstance(sid, str) and bool(re.fullmatch(SESSION_ID_PATTERN, sid))
    assert is_session_id(sid) is (by_pattern and sid not in (".", ".."))


@pytest.mark.parametrize("sid", SAMPLES)
def test_a_check_refuses_what_the_rule_refuses(sid: object) -> None:
    if is_session_id(sid):
        assert check_session_id(sid) == sid
    else:
        with pytest.raises(BadInput, match="invalid session id"):
            check_session_id(sid)
