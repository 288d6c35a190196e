"""Why a child exited, in one line, from the end of its log.

A worker that cannot start (an unknown broker transport, a bad setting, its host taken)
writes its reason to its log, often under a traceback; ``inbox up``'s console line for
the exit carries that reason so an operator need not open the log.
"""

from __future__ import annotations

import re
from pathlib import Path

# Lines that state an error: a Python exception's last line (``KeyError: 'No such
# transport: nosuch'``), Celery's ``[... ERROR/...]`` and ``CRITICAL`` log lines, click's
# ``Error: ...``, the bus's own ``inbox worker: ...`` and a refusal's JSON line.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Refused|Taken):\s")
_LOGGED = re.compile(r"\b(?:ERROR|CRITICAL)\b|^Error:\s|^inbox \w+:\s|^\{\"ok\": ?false")
MAX_CHARS = 300


def exit_reason(lines: list[str]) -> str | None:
    """The last line of ``lines`` that states an error, trimmed to :data:`MAX_CHARS`;
    None when none does (a clean exit, a kill)."""
    for line in reversed(lines):
        text = line.strip()
        if text and (_EXCEPTION.match(text) or _LOGGED.search(text)):
            return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."
    return None


def log_since(path: Path, offset: int, limit: int = 16384) -> list[str]:
    """The lines ``path`` gained after byte ``offset`` (at most its last ``limit`` bytes);
    none when unreadable."""
    try:
        with path.open("rb") as f:
            end = f.seek(0, 2)
            f.seek(max(offset, end - limit, 0))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def log_size(path: Path | None) -> int:
    """``path``'s size now (0 when absent): where a child's own lines start."""
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


__all__ = ["exit_reason", "log_since", "log_size"]
