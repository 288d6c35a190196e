"""A send answer as the ``ids`` hash keeps it, and back.

Every stored message's answer is kept for 7 days for its resends, so it is kept without
what its place says already: the message id (the hash field), the recipient's session
(the key's), ``"ok": true`` and ``"duplicate": false`` (every stored answer's), with no
spaces. :func:`restore` puts them back in :class:`~bus.core.models.SendAnswer`'s field order,
so a resend gets the answer the first send got. The Lua readers (``withdraw.lua``, ``answer_turn.lua``,
``receipt_open.lua``, the delivery) read only ``state`` (``receipt_open.lua`` and
``append_many.lua`` also ``thread``: a receipt beside its answer leaves it there) and keep
what they do not know.
"""

from __future__ import annotations

import json

from bus.core.threads import thread_label, thread_of

# Not ``typing.TYPE_CHECKING``: importing typing alone costs the read lane several ms
# (bus.lanes.read imports this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


# SendAnswer's and Recipient's fields, in their order (a test holds them equal).
ANSWER_FIELDS = ("ok", "id", "thread", "state", "recipient", "reason", "answer", "error")
RECIPIENT_FIELDS = ("session", "host", "state", "listening", "last_seen")


def keep(answer: dict[str, Any], sid: str, msg_id: str) -> str:
    """``answer`` (of ``msg_id`` to ``sid``) as the ``ids`` hash keeps it."""
    out = dict(answer)
    if out.get("ok") is True:
        del out["ok"]
    if out.get("id") == msg_id:
        del out["id"]
    if out.get("duplicate") is False:
        del out["duplicate"]
    rcpt = out.get("recipient")
    if isinstance(rcpt, dict) and rcpt.get("session") == sid:
        out["recipient"] = {f: v for f, v in rcpt.items() if f != "session"}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


def restore(raw: str | bytes, sid: str, msg_id: str) -> dict[str, Any]:
    """The answer :func:`keep` kept, whole again, in SendAnswer's field order."""
    kept = json.loads(raw)
    full: dict[str, Any] = {"ok": kept.get("ok", True), "id": kept.get("id", msg_id)}
    for name in ANSWER_FIELDS[2:]:
        if name in kept:
            full[name] = kept[name]
    rcpt = full.get("recipient")
    if isinstance(rcpt, dict):
        whole = {"session": rcpt.get("session", sid)}
        whole.update((f, rcpt[f]) for f in RECIPIENT_FIELDS[1:] if f in rcpt)
        whole.update((f, v) for f, v in rcpt.items() if f not in whole)
        full["recipient"] = whole
    full.update((f, v) for f, v in kept.items() if f not in full and f != "duplicate")
    full["duplicate"] = kept.get("duplicate", False)
    return full


# An inbox record's fields in the order ``Inbox.ingest`` writes them.
RECORD_FIELDS = (
    "id", "thread", "class", "kind", "from", "from_session", "at", "mark", "wakes", "why",
    "key", "m",
)  # fmt: skip
# Fields a record repeats from its message ``m`` (kept only when they differ from it).
# Not ``id``: what reads the hash whole (the chaos soak, tests) finds each record's id.
_FROM_MESSAGE = ("class", "kind", "from")
# The thread's key and id, computed from the message and the session (bus.core.threads).
_FROM_THREAD = ("key", "thread")
# cjson (the scripts that mark records re-encode them) keeps 14 significant digits.
CJSON_EXACT = 10**14
# Fields left out at their usual value, put back by :func:`restore_record`.
# (``why``: bus.core.policy.may_wake's reason for an ``action`` that may not wake, the usual.)
_DEFAULTS: dict[str, Any] = {"from_session": None, "wakes": False, "why": "not_from_parent"}


# A message's fields at their usual value (bus.core.models.Message's defaults; ``verified``
# as the bus sets it for an unauthenticated sender; ``to_id``: the record's session),
# each with the letter the record's ``md`` lists it by once left out of its ``m``.
_M_USUAL: dict[str, tuple[str, Any]] = {
    "v": ("v", 1), "urgency": ("u", "queue"), "kind": ("k", "message"),
    "class": ("c", "action"), "verified": ("f", False),
}  # fmt: skip
_M_TO = ("to_id", "t")
# A record's message leaves out its id when it is the record's (which stays: see above).
_M_ID = ("id", "i")


def _keep_message(msg: dict[str, Any], sid: str) -> tuple[dict[str, Any], str]:
    """``msg`` without its usual fields, and the letters of those left out."""
    out, letters = dict(msg), ""
    for name, (letter, usual) in _M_USUAL.items():
        if name in out and type(out[name]) is type(usual) and out[name] == usual:
            del out[name]
            letters += letter
    if out.get(_M_TO[0]) == sid:
        del out[_M_TO[0]]
        letters += _M_TO[1]
    return out, letters


def _restore_message(msg: dict[str, Any], letters: str, sid: str) -> dict[str, Any]:
    full = dict(msg)
    for name, (letter, usual) in _M_USUAL.items():
        if letter in letters:
            full.setdefault(name, usual)
    if _M_TO[1] in letters:
        full.setdefault(_M_TO[0], sid)
    return full


def _pr_exact(msg: dict[str, Any]) -> bool:
    """Whether the scripts that re-encode a record keep its message's ``pr`` exactly
    (else its thread's key could change, so the record keeps its key and id)."""
    pr = msg.get("pr")
    return pr is None or (isinstance(pr, int) and abs(pr) < CJSON_EXACT)


def _at_is_ts(at: Any, msg: dict[str, Any]) -> bool:
    """Whether a record's ``at`` is its message's ``ts``, which the scripts that re-encode
    the record keep exactly (so the record leaves ``at`` to it)."""
    ts = msg.get("ts")
    return type(at) is int and type(ts) is int and at == ts and 0 <= ts < CJSON_EXACT


def record_at(rec: dict[str, Any]) -> int:
    """A record's ``at`` as read from its JSON, kept or whole (0 when it has none)."""
    at = rec.get("at")
    if at is None and isinstance(rec.get("m"), dict):
        at = rec["m"].get("ts")
    return int(at or 0)


def _thread_of(sid: str, msg: dict[str, Any]) -> dict[str, str] | None:
    if not _pr_exact(msg):
        return None  # a script's re-encoding could change it, and so the thread's key
    try:
        key, thread = thread_of(sid, msg)
    except (KeyError, TypeError):
        return None
    return {"key": key, "thread": thread}


def keep_record(rec: dict[str, Any], sid: str) -> str:
    """An inbox record of session ``sid`` as the ``msgs`` hash keeps it: without what its message ``m`` says already (``class``, ``kind``, ``from``;
    the thread's ``key`` and id, :func:`bus.core.threads.thread_of`), without
    ``from_session`` when none, ``wakes`` when false and ``why`` when ``not_from_parent``,
    ``at`` when its message's ``ts``, its message without its usual fields nor its id
    when the record's (listed in ``md``), with no spaces. The Lua scripts that mark records read only ``mark``, ``at``
    (missing: ``m.ts``) and ``wakes`` (missing: false), and keep the rest."""
    out = dict(rec)
    msg = out.get("m")
    if isinstance(msg, dict):
        for name in _FROM_MESSAGE:
            if name in out and name in msg and out[name] == msg[name]:
                del out[name]
        derived = _thread_of(sid, msg) or {}
        for name in _FROM_THREAD:
            if name in out and out[name] == derived.get(name):
                del out[name]
    for name, usual in _DEFAULTS.items():
        if name in out and type(out[name]) is type(usual) and out[name] == usual:
            del out[name]
    if isinstance(msg, dict) and "at" in out and _at_is_ts(out["at"], msg):
        del out["at"]
    if isinstance(msg, dict) and "md" not in out:
        out["m"], letters = _keep_message(msg, sid)
        if "id" in out and out["m"].get(_M_ID[0]) == out["id"]:
            del out["m"][_M_ID[0]]
            letters += _M_ID[1]
        if letters:
            out["md"] = letters
    # ASCII escapes kept: a message's text may hold what UTF-8 cannot (a lone surrogate).
    return json.dumps(out, separators=(",", ":"))


def restore_record(raw: str | bytes, sid: str) -> dict[str, Any]:
    """The record :func:`keep_record` kept for ``sid``, whole again, in ``RECORD_FIELDS``
    order then any other field (marks' times)."""
    kept = json.loads(raw)
    msg = kept.get("m")
    if not isinstance(msg, dict):
        return dict(kept)
    letters = kept.pop("md", "")
    if isinstance(letters, str) and letters:
        msg = _restore_message(msg, letters, sid)
        if _M_ID[1] in letters and "id" in kept:
            msg = {_M_ID[0]: kept["id"], **msg}  # first, where the message has it
        kept["m"] = msg
    derived: dict[str, str] | None = None
    full: dict[str, Any] = {}
    for name in RECORD_FIELDS:
        if name in kept:
            full[name] = kept[name]
        elif name in _FROM_MESSAGE and name in msg:
            full[name] = msg[name]
        elif name == "at" and type(msg.get("ts")) is int:
            full[name] = msg["ts"]  # left out: its message's ts
        elif name in _FROM_THREAD:
            derived = derived or _thread_of(sid, msg)
            if derived:
                full[name] = derived[name]
        elif name in _DEFAULTS:
            full[name] = _DEFAULTS[name]
    full.update((f, v) for f, v in kept.items() if f not in full)
    return full


# A one-message thread's message (the thread record's ``one_m``) is kept
# without its usual fields, listed by letter in its own ``md`` (a wire message has no such
# field: bus.core.models.Message forbids extras). Its ``to_id`` stays: a thread has no session.
THREAD_LETTERS = "md"


def keep_thread_message(msg: dict[str, Any]) -> str:
    """``msg`` as a one-message thread's record keeps it, with no spaces."""
    out, letters = _keep_message(msg, "")
    if letters:
        out[THREAD_LETTERS] = letters
    return json.dumps(out, separators=(",", ":"))


def restore_thread_message(raw: str) -> str:
    """A thread's message as wire JSON: :func:`keep_thread_message`'s form whole again (its
    usual fields after the others); one with no ``md`` (a log entry past the first) as it was."""
    if f'"{THREAD_LETTERS}":' not in raw:  # cheap: most log entries are kept whole
        return raw
    msg = json.loads(raw)
    letters = msg.pop(THREAD_LETTERS, None) if isinstance(msg, dict) else None
    if not isinstance(letters, str):
        return raw
    return json.dumps(_restore_message(msg, letters, ""), separators=(",", ":"))


def newest_of_message(msg: dict[str, Any], at: int, preview: str) -> bool:
    """Whether a one-message thread's ``newest_at`` (``at``) and ``newest_preview``
    (``preview``) are its message's ``ts`` and ``text``, so its record leaves them to
    ``one_m`` (``thread_append.lua``; :func:`restore_newest` puts them back)."""
    ts, text = msg.get("ts"), msg.get("text")
    return type(ts) is int and ts == at and 0 <= ts < CJSON_EXACT and text == preview


def restore_newest(meta: dict[str, str]) -> None:
    """A thread record's ``newest_at`` / ``newest_preview`` from its ``one_m`` when it
    keeps neither (:func:`newest_of_message`); a record that keeps them is left as is."""
    one = meta.get("one_m")
    if "newest_at" in meta or not one:
        return
    msg = json.loads(one)
    if isinstance(msg, dict) and type(msg.get("ts")) is int:
        meta["newest_at"] = str(msg["ts"])
        meta["newest_preview"] = str(msg.get("text", ""))


def meta_of(raw: dict[str, str]) -> dict[str, str]:
    """A thread's record as read: its ``label`` is its key's when not stored
    (``thread_append.lua`` keeps none then); a one-message thread's
    ``newest_at`` / ``newest_preview`` are its message's when not stored (:func:`restore_newest`)."""
    meta = dict(raw)
    restore_newest(meta)
    if "label" not in meta and meta.get("key"):
        meta["label"] = thread_label(meta["key"])
    return meta


def thread_message_id(raw: str) -> str:
    """The id of a thread's one message as kept (``one_m``)."""
    return str(json.loads(raw)["id"])


def whole_record(
    msg: dict[str, Any],
    *,
    key: str,
    thread: str,
    sender_sid: str | None,
    at: int,
    wakes: bool,
    why: str,
) -> dict[str, Any]:
    """A new inbox record whole (``mark`` new), in ``RECORD_FIELDS`` order: what
    :func:`restore_record` gives back for what :func:`keep_ingested` keeps."""
    return {
        "id": msg["id"], "thread": thread, "class": msg.get("class", "action"),
        "kind": msg.get("kind", "message"), "from": msg["from"], "from_session": sender_sid,
        "at": at, "mark": "new", "wakes": wakes, "why": why, "key": key, "m": msg,
    }  # fmt: skip


def keep_ingested(whole: dict[str, Any], sid: str) -> tuple[str, str]:
    """``(record, thread message)`` for a message the inbox takes in (bus.delivery.inbox.ingest),
    from its record whole (:func:`whole_record`): the strings :func:`keep_record` and
    :func:`keep_thread_message` give for that record and its message, made in one pass
    (the batch's delivery does it per message)."""
    msg = whole["m"]
    key, thread, at, wakes, why = (whole[f] for f in ("key", "thread", "at", "wakes", "why"))
    out_m, letters = _keep_message(msg, "")
    thread_form = dict(out_m)
    if letters:
        thread_form[THREAD_LETTERS] = letters
    thread_json = json.dumps(thread_form, separators=(",", ":"))
    if "t" in letters or not sid:  # a message to "": the slow way keeps it exactly
        return keep_record(whole, sid), thread_json
    rec: dict[str, Any] = {"id": msg["id"]}
    exact = _pr_exact(msg)
    if not exact:
        rec["thread"] = thread
    if "class" not in msg:
        rec["class"] = "action"
    if "kind" not in msg:
        rec["kind"] = "message"
    if whole["from_session"] is not None:
        rec["from_session"] = whole["from_session"]
    if not _at_is_ts(at, msg):
        rec["at"] = at
    rec["mark"] = "new"
    if wakes is not False:
        rec["wakes"] = wakes
    if why != _DEFAULTS["why"]:
        rec["why"] = why
    if not exact:
        rec["key"] = key
    if out_m.get(_M_TO[0]) == sid:
        out_m = {f: v for f, v in out_m.items() if f != _M_TO[0]}
        letters += _M_TO[1]
    if out_m.get(_M_ID[0]) == rec["id"]:
        out_m = {f: v for f, v in out_m.items() if f != _M_ID[0]}
        letters += _M_ID[1]
    rec["m"] = out_m
    if letters:
        rec["md"] = letters
    return json.dumps(rec, separators=(",", ":")), thread_json


def json_list(raw: str | None) -> list[str]:
    """A JSON list of strings as a script stored it; empty for none. cjson encodes an
    empty Lua table as ``{}``, not ``[]``, so anything but a list reads empty."""
    value = json.loads(raw) if raw else []
    return [str(v) for v in value] if isinstance(value, list) else []
