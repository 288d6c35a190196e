"""A message id is its sender's: the idempotency key of a send is (sender, id).

A resend of an id by the sender that first used it is the same message (``duplicate``,
the first answer). The same id from another sender is refused ``id_taken`` before
anything is written: it can neither be dropped as "a duplicate" of someone else's
message nor move the id's receipt away from the sender who owns it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from bus.core.errors import Refused
from bus.core.models import Message

if TYPE_CHECKING:
    from bus.store.store import Store

Owner = tuple[str | None, str | None]


def owner_of(msg: Message) -> Owner:
    """Who a message is from, as its receipt records it: (session, handle)."""
    return (msg.from_session or None, msg.from_ or None)


def id_refusal(msg: Message, owner: Owner | None) -> Refused | None:
    """``id_taken`` when ``msg``'s id is already another sender's (``owner``), else None."""
    if owner is None or owner == owner_of(msg):
        return None
    return Refused(
        f"message id {msg.id!r} was already used by another sender; nothing was stored "
        "(send it with an id of your own, or none and one is made)",
        code="id_taken",
        id=msg.id,
    )


def owners(store: Store, msg_ids: Iterable[str]) -> dict[str, Owner]:
    """The sender of each of ``msg_ids`` that was stored within the receipts' retention:
    one round trip for the ids' receivers, one more only for the ids found."""
    found = store.queue.recipients_of(list(msg_ids))
    if not found:
        return {}
    pairs = list(found.items())
    rows = store.receipts.receipt_rows([(sid, msg_id) for msg_id, sid in pairs])
    out: dict[str, Owner] = {}
    for (msg_id, _sid), row in zip(pairs, rows, strict=True):
        h = row[0]
        if h:
            out[msg_id] = (h.get("from_session") or None, h.get("from") or None)
    return out
