"""Which servers the store supports, and which versions lack a known security fix.

Pure policy on a server's ``INFO server`` fields: :func:`identify` names its family and
version (Valkey reports ``redis_version:7.2.4`` for compatibility, so its own
``valkey_version`` is read first), :func:`assess` says whether the store supports it and
which listed advisories it predates, in words a person acts on. ``inbox up`` and
``inbox doctor`` say it (bus.store.server_check) before any script meets an old server.
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int, int]

# The oldest server of each family the store runs on: every command and script feature it
# uses exists there (XAUTOCLAIM, XADD MINID/NOMKSTREAM, GETDEL, SET GET: Redis 6.2), and
# the contract suite has run on it. Valkey's first release was 7.2.4.
FLOOR: dict[str, Version] = {"redis": (6, 2, 0), "valkey": (7, 2, 4)}


@dataclass(frozen=True)
class Advisory:
    """Security fixes released together: per family, the first fixed version of each line
    (major.minor) that got them. A line not listed but older than a listed one never got
    them (end of life); a line newer than every listed one was released with them."""

    cves: tuple[str, ...]
    what: str
    fixed: dict[str, tuple[Version, ...]]


ADVISORIES: tuple[Advisory, ...] = (
    Advisory(
        cves=("CVE-2025-49844", "CVE-2025-46817", "CVE-2025-46818", "CVE-2025-46819"),
        what="Lua scripting flaws (use-after-free, remote code execution for anyone who can run a script)",
        fixed={
            "redis": ((6, 2, 20), (7, 2, 11), (7, 4, 6), (8, 0, 4), (8, 2, 2)),
            "valkey": ((7, 2, 11), (8, 0, 6), (8, 1, 4), (9, 0, 0)),
        },
    ),
)


@dataclass(frozen=True)
class Assessment:
    """``state``: ``ok``, ``too_old`` (below the floor: refused) or ``unfixed`` (supported,
    but a listed advisory's fix is missing: warned). ``message`` says it in words and what
    to do; empty when ``ok``."""

    family: str
    version: Version
    state: str
    message: str
    missing: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.family.capitalize()} {'.'.join(map(str, self.version))}"

    def as_dict(self) -> dict[str, object]:
        return {
            "server": self.name,
            "state": self.state,
            "message": self.message,
            "missing_fixes": list(self.missing),
        }


def parse_version(text: str) -> Version:
    """``"7.0.15"`` -> ``(7, 0, 15)``; a part's leading digits count, missing ones 0."""
    parts: list[int] = []
    for piece in str(text).split(".")[:3]:
        digits = ""
        for ch in piece:  # the leading digits: "2-rc1" is 2
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def identify(info: dict[str, object]) -> tuple[str, Version]:
    """A server's family and version from its ``INFO server`` fields."""
    if info.get("valkey_version") or str(info.get("server_name", "")).lower() == "valkey":
        return "valkey", parse_version(str(info.get("valkey_version") or "0"))
    return "redis", parse_version(str(info.get("redis_version") or "0"))


def lacks(advisory: Advisory, family: str, version: Version) -> tuple[Version, ...] | None:
    """The fixed versions to move to when ``version`` predates ``advisory``'s fix, else
    ``None``."""
    fixed = advisory.fixed.get(family)
    if not fixed:
        return None
    line = version[:2]
    for first in fixed:
        if first[:2] == line:
            return None if version >= first else (first,)
    if line > max(f[:2] for f in fixed):
        return None  # a line released after the fix
    newer = tuple(f for f in fixed if f[:2] > line)
    return newer  # an older line the fix never reached


def _v(version: Version) -> str:
    return ".".join(map(str, version))


def assess(family: str, version: Version) -> Assessment:
    """The store's word on a ``family`` server at ``version`` (table-driven tests)."""
    floor = FLOOR.get(family, FLOOR["redis"])
    name = f"{family.capitalize()} {_v(version)}"
    if version < floor:
        return Assessment(
            family,
            version,
            "too_old",
            f"the server is {name}; the bus needs {family.capitalize()} {_v(floor)} or later "
            "(its scripts use commands older servers lack): upgrade the server, or unset "
            "INBOX_REDIS_URL so `inbox up` starts its embedded one",
        )
    missing: list[str] = []
    words: list[str] = []
    for advisory in ADVISORIES:
        to = lacks(advisory, family, version)
        if to is None:
            continue
        missing += advisory.cves
        words.append(
            f"{', '.join(advisory.cves)} ({advisory.what}; fixed in {', '.join(_v(v) for v in to)})"
        )
    if not missing:
        return Assessment(family, version, "ok", "")
    return Assessment(
        family,
        version,
        "unfixed",
        f"the server is {name}, which predates the fixes for {'; '.join(words)}: "
        "upgrade it (a distribution that patches its build without changing the version "
        "may have the fixes already), and keep its port to trusted clients meanwhile",
        tuple(missing),
    )


__all__ = [
    "ADVISORIES",
    "FLOOR",
    "Advisory",
    "Assessment",
    "assess",
    "identify",
    "lacks",
    "parse_version",
]
