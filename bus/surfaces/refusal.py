"""The one refusal shape of the command line, and running it.

Every refusal, on every command: ``{"ok": false, "error": code, "message": ...}`` as one
JSON line on stdout, one ``inbox: ...`` line on stderr (with a hint where there is one),
and a non-zero exit (2 bad input or usage, 1 refused or not found, 3 Redis down).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer

from bus.core.errors import BusError

T = TypeVar("T")


def emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def refuse(
    error: str,
    message: str,
    code: int = 2,
    *,
    hint: str | None = None,
    details: dict[str, Any] | None = None,
) -> NoReturn:
    """The one refusal shape: JSON on stdout, one line on stderr, exit ``code``."""
    emit({"ok": False, "error": error, "message": message, **(details or {})})
    sys.stderr.write(f"inbox: {message}" + (f"; {hint}" if hint else "") + "\n")
    raise typer.Exit(code)


def fail(
    message: str, code: int = 2, error: str = "bad_input", hint: str | None = None
) -> NoReturn:
    refuse(error, message, code, hint=hint)


def run(fn: Callable[[], T]) -> T:
    """Call the library; a refusal becomes the one refusal shape and the error's exit code."""
    try:
        return fn()
    except BusError as exc:
        _refuse_error(exc)
    except ValueError as exc:
        fail(str(exc), 2)
    except ConnectionError as exc:
        _refuse_error(_unavailable(exc))
    except OSError as exc:
        from bus.core.disk_space import full_refusal, is_full

        if is_full(exc):  # in words, with the folder and the fix, not "[Errno 28]"
            full = full_refusal(exc, os.environ.get("INBOX_HOME"))
            details = {"folder": full["folder"], "fix": full["fix"]}
            refuse("disk_full", full["message"], 1, hint=full["fix"], details=details)
        fail(str(exc), 1, "os_error")
    except Exception as exc:
        said = _store_refusal(exc)
        if said is None:
            raise
        _refuse_error(said)


def _store_refusal(exc: Exception) -> BusError | None:
    """A store's reply that it refuses writes (MISCONF, READONLY, OOM, ...) from any call,
    as the bus's refusal; None for anything else (redis is imported only for its errors)."""
    if not type(exc).__module__.startswith("redis"):
        return None
    from bus.store.redis_errors import refused

    return refused(exc)


def _refuse_error(exc: BusError) -> NoReturn:
    details = {k: v for k, v in exc.to_json().items() if k not in ("ok", "error", "message")}
    refuse(exc.code, str(exc), exc.exit_code, details=details)


def _unavailable(exc: BaseException) -> BusError:
    from bus.store.redis_errors import unavailable  # imports redis: only when Redis failed

    return unavailable(exc)


def _redis_errors() -> tuple[type[BaseException], ...]:
    """Redis not answering, or answering that it refuses writes (an error reply of
    another kind is a bug: :func:`_as_refusal` raises it again)."""
    from bus.store.redis_errors import CONNECTION_ERRORS, REPLY_ERRORS  # only when it failed

    return (*CONNECTION_ERRORS, *REPLY_ERRORS)


def _as_refusal(exc: BaseException) -> BusError:
    from bus.store.redis_errors import CONNECTION_ERRORS, refused

    said = refused(exc)
    if said is not None:
        return said
    if isinstance(exc, CONNECTION_ERRORS):
        return _unavailable(exc)
    raise exc


def bus_call(fn: Callable[[], T]) -> T:
    try:
        return run(fn)
    except _redis_errors() as exc:
        _refuse_error(_as_refusal(exc))


def _click_errors() -> tuple[type[Exception], type[Exception]]:
    try:  # typer 0.2x vendors click
        from typer._click.exceptions import ClickException, UsageError
    except ImportError:
        from click.exceptions import ClickException, UsageError  # type: ignore[assignment]
    return ClickException, UsageError


def _sentence(exc: Exception) -> str:
    """Click's message without its closing period (the hint follows it on the line)."""
    return str(exc.format_message()).rstrip(".")  # type: ignore[attr-defined]


def run_app(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run ``app``; usage mistakes get the refusal shape; returns the exit code."""
    click_exception, usage_error = _click_errors()
    code: Any = 0
    try:
        try:
            code = app(args=argv, standalone_mode=False, prog_name="inbox")
        except usage_error as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                # Bare `inbox` or `inbox session`: the help, and exit 2, as typer does.
                text = exc.format_message()  # type: ignore[attr-defined]
                sys.stdout.write(text + "\n" if text else "")
                raise typer.Exit(2) from None
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "inbox"
            fail(_sentence(exc), 2, "usage", f"see: {where} --help")
        except click_exception as exc:
            fail(_sentence(exc), 2, "usage")
    except typer.Exit as done:
        code = done.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    return code if isinstance(code, int) else 0


__all__ = ["bus_call", "emit", "fail", "refuse", "run", "run_app"]
