"""The web inbox's gate: who the visitor is (the sign-in cookie), CSRF tokens, the
same-origin check for form posts, the bounded form body, and the security headers."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import Request
from starlette.datastructures import FormData
from starlette.requests import Request as StarletteRequest

from bus.core.errors import BadInput, BusError, Refused
from bus.services.pictures import MAX_PICTURE_BYTES, MAX_PICTURES
from bus.trust import tokens

from .permission import LOCAL_OPERATOR, Viewer

if TYPE_CHECKING:
    from bus.api import Bus

COOKIE = "inbox_ui"
# The pre-sign-in cookie: a random value the sign-in confirmation form must echo (as an
# HMAC of it), so a cross-site page can neither post the form nor read its value.
LOGIN_COOKIE = "inbox_login"
LOGIN_COOKIE_TTL_S = 600
CSRF_FIELD = "csrf"
# Every picture at its bound plus room for the words and the multipart framing.
MAX_FORM_BYTES = MAX_PICTURES * MAX_PICTURE_BYTES + 256 * 1024


class TooLarge(BusError):
    """A form body over :data:`MAX_FORM_BYTES`; nothing was read past the bound."""

    code = "body_too_large"
    exit_code = 2


def is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Gate:
    """Per-app secrets and checks; the cookie and CSRF keys derive from ``INBOX_SECRET``
    (so they survive restarts and agree across gateway processes), else a random key."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        root = bus.settings.secret
        base = root.encode("utf-8") if root else secrets.token_bytes(32)
        self._csrf_key = hmac.new(base, b"inbox-ui-csrf", hashlib.sha256).digest()

    # -- who is visiting --------------------------------------------------------------

    def viewer(self, request: Request) -> Viewer | None:
        """The signed-in viewer, or None. Without a secret, a loopback visitor is the
        local operator; with one, only a valid, unrevoked sign-in token counts."""
        secret = self.bus.settings.secret
        if not secret:
            client = request.client.host if request.client else None
            return Viewer("operator", LOCAL_OPERATOR) if is_loopback(client) else None
        token = request.cookies.get(COOKIE)
        if not token:
            return None
        try:
            return self.viewer_for(token)
        except BusError:
            return None

    def viewer_for(self, token: str) -> Viewer:
        """The viewer a sign-in token names; raises ``Unauthorized`` for a bad one."""
        if not self.bus.settings.secret:
            raise BadInput("sign-in tokens need INBOX_SECRET on the server", code="no_secret")
        claims = self.bus.auth.verify(token)
        if claims.sub_kind == "member" and tokens.SCOPE_READ in claims.scopes:
            workspace, _, name = claims.sub.partition("/")
            return Viewer("member", name, workspace, token=token, jti=claims.jti)
        if claims.sub_kind == "operator" and tokens.SCOPE_OPERATOR in claims.scopes:
            return Viewer("operator", claims.sub, token=token, jti=claims.jti)
        raise Refused(
            "this token does not sign anyone in to the web inbox (a member or operator "
            "token is needed)",
            code="not_a_signin_token",
        )

    # -- CSRF -------------------------------------------------------------------------

    def csrf_token(self, viewer: Viewer | None) -> str:
        """The form token for this viewer's sign-in (bound to the token's id)."""
        if viewer is None:
            return ""
        bound = viewer.jti or f"local:{viewer.name}"
        return hmac.new(self._csrf_key, bound.encode("utf-8"), hashlib.sha256).hexdigest()

    def login_csrf(self, nonce: str) -> str:
        """The sign-in form's token for the pre-sign-in cookie's ``nonce``."""
        return hmac.new(self._csrf_key, f"login:{nonce}".encode(), hashlib.sha256).hexdigest()

    def check_login_post(self, request: Request, form: FormData) -> None:
        """Refuse a sign-in post from another site, or without the pre-sign-in cookie
        (SameSite=Strict: never sent on a cross-site post) and its form token."""
        if not self.same_origin(request):
            raise Refused("the form was posted from another site", code="cross_origin")
        nonce = request.cookies.get(LOGIN_COOKIE) or ""
        sent = form.get(CSRF_FIELD)
        if not nonce or not isinstance(sent, str) or not sent:
            raise Refused("the sign-in form carries no valid CSRF token", code="csrf")
        if not hmac.compare_digest(sent.encode(), self.login_csrf(nonce).encode()):
            raise Refused("the sign-in form carries no valid CSRF token", code="csrf")

    def check_post(self, request: Request, viewer: Viewer | None, form: FormData) -> None:
        """Refuse a form post from another origin or without this viewer's CSRF token."""
        if not self.same_origin(request):
            raise Refused("the form was posted from another site", code="cross_origin")
        sent = form.get(CSRF_FIELD)
        if viewer is None or not isinstance(sent, str) or not sent:
            raise Refused("the form carries no valid CSRF token", code="csrf")
        if not hmac.compare_digest(sent.encode(), self.csrf_token(viewer).encode()):
            raise Refused("the form carries no valid CSRF token", code="csrf")

    def same_origin(self, request: Request) -> bool:
        """Whether the post comes from this site: ``Origin`` (else ``Referer``) must be
        this server's own origin or ``INBOX_UI_URL``'s; browsers always send one of them
        on a form post, and a fetch-metadata ``cross-site`` is refused outright."""
        if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return False
        allowed = {_origin(str(request.base_url)), _origin(self.bus.settings.ui_url)}
        origin = request.headers.get("origin")
        if origin is not None:
            return origin in allowed
        referer = request.headers.get("referer")
        if referer is not None:
            return _origin(referer) in allowed
        return True  # not a browser; the CSRF token still has to match

    # -- bounded bodies ---------------------------------------------------------------

    async def form(self, request: Request) -> FormData:
        """The form, refused with ``body_too_large`` past :data:`MAX_FORM_BYTES`: the
        declared length is checked first, then the bytes as they arrive."""
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise BadInput("bad Content-Length")
            if int(declared) > MAX_FORM_BYTES:
                raise TooLarge(f"the form is over {MAX_FORM_BYTES} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                raise TooLarge(f"the form is over {MAX_FORM_BYTES} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        sent = False

        async def receive() -> dict[str, object]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        replay = StarletteRequest(request.scope, receive)
        return await replay.form(max_files=MAX_PICTURES, max_fields=20)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def security_headers(nonce: str, *, page: bool = True) -> dict[str, str]:
    """CSP (scripts only with this response's nonce), nosniff, frame denial, no referrer
    off the site."""
    csp = (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; "
        "style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    headers = {
        "Content-Security-Policy": csp,
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        # "no-referrer" would make browsers send "Origin: null" on our own form posts.
        "Referrer-Policy": "same-origin",
        "Cross-Origin-Opener-Policy": "same-origin",
    }
    if page:
        headers["Cache-Control"] = "no-store"
    return headers
