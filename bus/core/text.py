"""Injection-safe text helpers shared by stamps and notices."""

from __future__ import annotations

import re
import unicodedata

# Bidi controls that are not category Cf in every Unicode version, named explicitly.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def is_format_char(ch: str) -> bool:
    """Format characters (Cf: zero-width, bidi overrides, tag characters U+E0000..E007F)."""
    return unicodedata.category(ch) == "Cf" or ch in _BIDI or 0xE0000 <= ord(ch) <= 0xE007F


# Characters that print as nothing (or as a space) but are letters or symbols to Unicode,
# so a category check lets them through: the Braille blank, Hangul and half-width
# fillers, Khmer inherent vowels, the Mongolian vowel separator.
INVISIBLE_FILLERS = frozenset("\u2800\u3164\u115f\u1160\uffa0\u17b4\u17b5\u180e")


def reveal_invisible(text: str) -> str:
    """``text`` with each invisible character (format characters: bidi controls,
    zero-width characters, tag characters; and the invisible fillers) written as
    ``<U+XXXX>``, so a person reading what the model read sees them too. Pure."""
    if text.isascii():  # no ASCII character is one: most bodies pass untouched
        return text
    return "".join(
        f"<U+{ord(ch):04X}>" if is_format_char(ch) or ch in INVISIBLE_FILLERS else ch for ch in text
    )


def strip_format(text: str) -> str:
    """``text`` without format characters, so a label cannot hide or reorder what it shows."""
    if text.isascii():  # no ASCII character is one (every notice line strips its labels)
        return text
    return "".join(ch for ch in text if not is_format_char(ch))


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LABEL_DROP = re.compile(r"[\"'`\[\]{}<>()]")
BAR = "│"


def sanitize_label(label: str, limit: int = 120) -> str:
    """A sender label safe to put in a header: no control characters, newlines,
    quotes or brackets, so it cannot close the header or forge another."""
    # Format characters (bidi overrides, zero-width, tags) go first: they could reorder
    # or hide what the label shows.
    cleaned = _LABEL_DROP.sub("", _CONTROL.sub(" ", strip_format(label)))
    cleaned = " ".join(cleaned.split())
    return cleaned[:limit] or "unknown"


def one_line(text: str, limit: int = 120) -> str:
    """The first non-blank line of ``text``, control characters removed, cut to ``limit``."""
    for ln in text.splitlines():
        ln = " ".join(_CONTROL.sub(" ", strip_format(ln)).split())
        if ln:
            return ln if len(ln) <= limit else ln[: limit - 1] + "…"
    return ""


def indent_body(text: str, prefix: str = f"  {BAR} ") -> str:
    """Every body line under the bar, so no body line can pass for a header; invisible
    characters shown (:func:`reveal_invisible`)."""
    lines = reveal_invisible(text).splitlines() or [""]
    return "\n".join(prefix + _CONTROL.sub(" ", ln).rstrip() for ln in lines)
