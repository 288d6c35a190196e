"""The web inbox's rendering of an agent's Markdown (bus.surfaces.web.markdown)."""

from __future__ import annotations

import pytest

from bus.surfaces.web.markdown import markdown

LINK = 'rel="noopener noreferrer nofollow" target="_blank"'


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("**Plan**: ship", "<p><strong>Plan</strong>: ship</p>\n"),
        ("- a\n- b", "<ul>\n<li>a</li>\n<li>b</li>\n</ul>\n"),
        ("`make test`", "<p><code>make test</code></p>\n"),
        ("one\ntwo", "<p>one<br />\ntwo</p>\n"),  # a line break stays one
        # Raw HTML is text, never markup.
        ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"),
        ("<img src=x onerror=alert(1)>", "<p>&lt;img src=x onerror=alert(1)&gt;</p>\n"),
        # A script link stays text; a web link opens apart, without the referrer.
        ("[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>\n"),
        ("[docs](https://a.example)", f'<p><a href="https://a.example" {LINK}>docs</a></p>\n'),
        # No picture from the text: at most a link to it.
        (
            "![p](https://t.example/p.png)",
            f'<p>!<a href="https://t.example/p.png" {LINK}>p</a></p>\n',
        ),
        ("", ""),
        (None, ""),
    ],
)
def test_an_agents_markdown_as_the_page_shows_it(text: str | None, html: str) -> None:
    assert str(markdown(text)) == html
