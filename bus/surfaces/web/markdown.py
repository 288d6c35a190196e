"""The Markdown an agent writes into an item (``reply-inbox``, ``item post``) as the web
inbox shows it: CommonMark rendered by markdown-it-py with raw HTML off (a ``<script>`` in
the text is shown as text), a line break kept as one, no pictures from the text (an
agent's pictures are the files it attached; a picture in the text would make every
reader's browser fetch its address), and links opened in a new tab without the page's
referrer (markdown-it-py's own check refuses ``javascript:``, ``vbscript:``, ``file:`` and
``data:`` links: they stay text)."""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup

_MD = MarkdownIt(
    "commonmark", {"html": False, "breaks": True, "linkify": False, "typographer": False}
).disable("image")


def _link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    tokens[idx].attrSet("target", "_blank")
    return str(renderer.renderToken(tokens, idx, options, env))


_MD.add_render_rule("link_open", _link_open)


def markdown(text: object) -> Markup:
    """``text`` as safe HTML (a Jinja filter: the result is not escaped again)."""
    return Markup(_MD.render(str(text or "")))


__all__ = ["markdown"]
