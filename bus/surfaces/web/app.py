"""The web inbox's pages, mounted under ``/ui/`` on the gateway (``inbox serve``).

Every view finds the viewer (:mod:`.guard`), makes the one permission check
(:func:`.permission.check`), parses its input, and makes one call on the bus. Pages are
rendered on the server (Jinja2, autoescaped); one small script (nonced) keeps the
operator's sessions page live over server-sent events.
"""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from bus.core.errors import BadInput, BusError, NotFound, Refused, Unauthorized, Unavailable
from bus.core.models import check_session_id, parse_message
from bus.services.pictures import MAX_PICTURES, sniff
from bus.store.keys import check_item_key
from bus.store.redis_errors import StoreError
from bus.store.redis_errors import refused as store_refusal

from .forms import field, read_bounded, save_upload
from .live import live
from .markdown import markdown
from .page_gate import (
    COOKIE,
    CSRF_FIELD,
    LOGIN_COOKIE,
    LOGIN_COOKIE_TTL_S,
    Gate,
    TooLarge,
    security_headers,
)
from .permission import Need, Viewer, check

if TYPE_CHECKING:
    from bus.api import Bus

HERE = Path(__file__).parent
PREFIX = "/ui"
_STATUS: list[tuple[type[BusError], int]] = [
    (TooLarge, 413),
    (BadInput, 400),
    (Unauthorized, 401),
    (Refused, 403),
    (NotFound, 404),
    (Unavailable, 503),
]


def status_of(err: BusError) -> int:
    return next((code for cls, code in _STATUS if isinstance(err, cls)), 400)


def _when(ms: object) -> str:
    """Milliseconds since the epoch as a short UTC time for the pages."""
    import datetime as dt

    if not isinstance(ms, int) or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seg(value: object) -> str:
    """One URL path segment (item keys keep their readable ``:``)."""
    return quote(str(value), safe=":")


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # everything user-written is escaped
    )
    env.filters["when"] = _when
    env.filters["q"] = seg
    env.filters["markdown"] = markdown  # an agent's item text (safe HTML, see .markdown)
    return env


def create_ui(bus: Bus) -> FastAPI:
    """The ``/ui`` sub-application for ``bus``."""
    ui = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    gate = Gate(bus)
    env = templates()
    ui.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @ui.middleware("http")
    async def headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        request.state.nonce = secrets.token_urlsafe(16)
        response = await call_next(request)
        static = request.url.path.startswith(f"{PREFIX}/static/")
        for name, value in security_headers(request.state.nonce, page=not static).items():
            response.headers.setdefault(name, value)
        return response

    async def who(request: Request) -> Viewer | None:
        # Verifying a token asks Redis whether it was revoked: off the event loop.
        return await run_in_threadpool(gate.viewer, request)

    def page(
        request: Request, name: str, viewer: Viewer | None, code: int = 200, **ctx: Any
    ) -> HTMLResponse:
        html = env.get_template(name).render(
            nonce=request.state.nonce,
            csrf=gate.csrf_token(viewer),
            csrf_field=CSRF_FIELD,
            viewer=viewer,
            ui=PREFIX,
            **ctx,
        )
        return HTMLResponse(html, code)

    @ui.exception_handler(BusError)
    async def refused(request: Request, err: BusError) -> Response:
        viewer = await who(request)
        status = status_of(err)
        return page(request, "error.html", viewer, status, status=status, error=err.to_json())

    @ui.exception_handler(StoreError)
    async def store_down(request: Request, err: StoreError) -> Response:
        said = store_refusal(err)
        if said is not None:
            return page(request, "error.html", None, 503, status=503, error=said.to_json())
        return page(
            request,
            "error.html",
            None,
            503,
            status=503,
            error={"error": "unavailable", "message": "the store (Redis) did not answer"},
        )

    async def posted(
        request: Request, need: Need, sid: str | None = None
    ) -> tuple[Viewer, FormData]:
        """A form post's viewer and fields, after the origin, permission, size and CSRF
        checks, in that order (nothing is read from a refused post past its headers)."""
        viewer = await who(request)
        if not gate.same_origin(request):
            raise Refused("the form was posted from another site", code="cross_origin")
        await run_in_threadpool(check, bus, viewer, need, sid)
        form = await gate.form(request)
        gate.check_post(request, viewer, form)
        assert viewer is not None  # check() refused a signed-out visitor
        return viewer, form

    def back(url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=303)

    # -- signing in and out -----------------------------------------------------------

    def signed_in(request: Request, viewer: Viewer, token: str) -> Response:
        response = page(request, "signing_in.html", viewer)
        # The address may still hold the token: it goes nowhere else, not even as a Referer.
        response.headers["Referrer-Policy"] = "no-referrer"
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=PREFIX,
        )
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    @ui.get("/login")
    async def login(request: Request, token: str = "") -> Response:
        """Sign in with a link's token: at once when the visitor opened the link
        themselves (``Sec-Fetch-Site: none``, or from this site), else after they confirm
        on a same-origin form, so a cross-site page cannot sign a visitor in as someone
        else (login CSRF).

        The way on to ``/ui/`` is the page's own refresh, not a 303: a link opened from
        a chat or a mail page is a cross-site navigation, and a browser withholds a
        SameSite=Strict cookie from every redirect of that chain, but sends it on a
        navigation this page starts.
        """
        if not bus.settings.secret and not token:
            return back(f"{PREFIX}/")
        viewer = await run_in_threadpool(gate.viewer_for, token)  # refuses a bad token
        if request.headers.get("sec-fetch-site") in ("none", "same-origin"):
            return signed_in(request, viewer, token)
        nonce = secrets.token_urlsafe(24)
        response = page(
            request,
            "confirm_login.html",
            None,
            signing_in=viewer,
            login_token=token,
            login_csrf=gate.login_csrf(nonce),
        )
        # The token in the address goes to no other site; "no-referrer" would make the
        # browser post the confirmation with "Origin: null", which the form check refuses.
        response.headers["Referrer-Policy"] = "same-origin"
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            max_age=LOGIN_COOKIE_TTL_S,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=PREFIX,
        )
        return response

    @ui.post("/login")
    async def login_confirmed(request: Request) -> Response:
        """The confirmation form: same origin, the pre-sign-in cookie's token, a good
        sign-in token; then the cookie is set."""
        form = await gate.form(request)
        gate.check_login_post(request, form)
        token = field(form, "token")
        viewer = await run_in_threadpool(gate.viewer_for, token)
        return signed_in(request, viewer, token)

    @ui.post("/logout")
    async def logout(request: Request) -> Response:
        """Sign out: the cookie goes and its sign-in token is revoked."""
        viewer = await who(request)
        if viewer is None:
            return back(f"{PREFIX}/signed-out")
        if not gate.same_origin(request):
            raise Refused("the form was posted from another site", code="cross_origin")
        form = await gate.form(request)
        gate.check_post(request, viewer, form)
        if viewer.token:
            await run_in_threadpool(bus.revoke_token, viewer.token)
        response = back(f"{PREFIX}/signed-out")
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    @ui.get("/signed-out")
    async def signed_out(request: Request) -> Response:
        return page(request, "signed_out.html", None)

    # -- members ----------------------------------------------------------------------

    @ui.get("/")
    async def home(request: Request) -> Response:
        """A member's items (every session of their workspace); operators go to sessions."""
        viewer = await who(request)
        if viewer is None:
            return page(request, "signed_out.html", None, 401)
        if viewer.kind == "operator":
            return back(f"{PREFIX}/sessions")
        await run_in_threadpool(check, bus, viewer, "items")
        assert viewer.workspace is not None
        data = await run_in_threadpool(bus.workspace_items, viewer.workspace)
        return page(request, "items.html", viewer, items=data["items"])

    @ui.get("/items/{sid}/{key}")
    async def item(request: Request, sid: str, key: str) -> Response:
        viewer = await who(request)
        check_session_id(sid)
        check_item_key(key)
        await run_in_threadpool(check, bus, viewer, "item_read", sid)
        data = await run_in_threadpool(bus.item_detail, sid, key)
        return page(request, "item.html", viewer, item=data["item"])

    @ui.get("/items/{sid}/{key}/files/{name}")
    async def picture(request: Request, sid: str, key: str, name: str) -> Response:
        """A picture of the item, to those who may read it, typed by its bytes."""
        viewer = await who(request)
        check_session_id(sid)
        check_item_key(key)
        await run_in_threadpool(check, bus, viewer, "item_read", sid)
        path = await run_in_threadpool(bus.item_file, sid, key, name)
        data = await run_in_threadpool(read_bounded, path)
        kind = sniff(data)
        if kind is None:
            raise NotFound(f"item {key!r} has no picture {name!r}", code="unknown_file")
        return Response(
            data,
            media_type=kind,
            # No Cache-Control here: the pages' no-store applies, so a picture does not
            # outlive the viewer's right to it in a shared browser's cache.
            headers={"Content-Disposition": f"inline; filename*=UTF-8''{quote(name, safe='')}"},
        )

    @ui.post("/items/{sid}/{key}/write")
    async def write(request: Request, sid: str, key: str) -> Response:
        """Message and/or pictures on an item: exactly ``inbox item write``."""
        check_session_id(sid)
        check_item_key(key)
        viewer, form = await posted(request, "item_write", sid)
        text = field(form, "text")
        uploads = [f for f in form.getlist("pictures") if isinstance(f, UploadFile) and f.filename]
        if len(uploads) > MAX_PICTURES:
            raise BadInput(f"at most {MAX_PICTURES} pictures", code="too_many_pictures")
        with tempfile.TemporaryDirectory(prefix="inbox-ui-") as tmp:
            paths = [await save_upload(Path(tmp), n, f) for n, f in enumerate(uploads)]
            await run_in_threadpool(
                lambda: bus.item_write(
                    sid,
                    key,
                    member=viewer.name,
                    text=text if text.strip() else None,
                    image_paths=paths,
                    root=Path(tmp),
                    token=viewer.token,
                )
            )
        return back(f"{PREFIX}/items/{seg(sid)}/{seg(key)}#end")

    @ui.post("/items/{sid}/{key}/settle")
    async def settle(request: Request, sid: str, key: str) -> Response:
        """Settle an item with an answer: exactly ``inbox item settle``."""
        check_session_id(sid)
        check_item_key(key)
        viewer, form = await posted(request, "item_write", sid)
        answer = field(form, "answer")
        await run_in_threadpool(
            lambda: bus.item_settle(sid, key, member=viewer.name, answer=answer, token=viewer.token)
        )
        return back(f"{PREFIX}/items/{seg(sid)}/{seg(key)}")

    # -- operators --------------------------------------------------------------------

    @ui.get("/sessions")
    async def sessions(request: Request) -> Response:
        viewer = await who(request)
        await run_in_threadpool(check, bus, viewer, "operate")
        rows = await run_in_threadpool(bus.watch.top_rows)
        return page(request, "sessions.html", viewer, rows=rows)

    @ui.get("/sessions/events")
    async def session_events(request: Request) -> Response:
        """Server-sent events: each message into any session's stream, with fresh rows."""
        viewer = await who(request)
        await run_in_threadpool(check, bus, viewer, "operate")
        return StreamingResponse(
            live(bus, request.headers.get("last-event-id")),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @ui.get("/sessions/{sid}")
    async def session(request: Request, sid: str) -> Response:
        """A session's threads, its typed requests with their state, and a send form."""
        viewer = await who(request)
        check_session_id(sid)
        await run_in_threadpool(check, bus, viewer, "operate")
        info = await run_in_threadpool(bus.session, sid)
        threads = await run_in_threadpool(bus.conversation.threads, sid)
        requests = [t for t in threads if t.get("state")]
        posted_items: list[dict[str, Any]] = []
        if info.workspace:
            listed = await run_in_threadpool(bus.workspace_items, info.workspace)
            posted_items = [i for i in listed["items"] if i["session"] == sid]
        return page(
            request,
            "session.html",
            viewer,
            info=info,
            threads=threads,
            requests=requests,
            items=posted_items,
        )

    @ui.get("/sessions/{sid}/threads/{thread}")
    async def thread(request: Request, sid: str, thread: str) -> Response:
        viewer = await who(request)
        check_session_id(sid)
        await run_in_threadpool(check, bus, viewer, "operate")
        data = await run_in_threadpool(bus.conversation.read, sid, thread)
        return page(request, "thread.html", viewer, sid=sid, thread=data)

    @ui.post("/sessions/{sid}/send")
    async def send(request: Request, sid: str) -> Response:
        """An operator's message to a session (from ``operator:<name>``, verified by the
        sign-in when authentication is on)."""
        check_session_id(sid)
        viewer, form = await posted(request, "operate", sid)
        fields = {
            "from": f"operator:{viewer.name}",
            "to_id": sid,
            "text": field(form, "text"),
            "class": field(form, "class") or "action",
            "verified": bus.auth.enabled,
        }
        try:
            msg = parse_message(fields)
        except ValueError as exc:
            raise BadInput(" ".join(str(exc).split())[:300]) from exc
        answer = await run_in_threadpool(bus.post, msg)
        if not answer.get("ok", True):
            raise NotFound(str(answer.get("reason", "not delivered")), code="bounced")
        return back(f"{PREFIX}/sessions/{seg(sid)}")

    return ui


def mount_ui(app: FastAPI, bus: Bus) -> None:
    """Serve the web inbox under ``/ui/`` on the gateway ``app``."""
    app.mount(PREFIX, create_ui(bus), name="ui")
