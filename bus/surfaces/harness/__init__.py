"""What each harness runs: its hooks and what they install, wake and listen with.

``hook_run`` (``inbox hook HARNESS EVENT``, the entry every installed hook command calls)
picks ``hooks`` (Claude Code's) or ``hooks_codex`` (Codex's); ``hook_install`` writes them
into a harness's settings; ``codex_wake`` (the wake of an idle Codex session, and where
Codex keeps its files) and ``codex_trust`` (the trust Codex asks of hooks); ``link`` (which
session a harness's MCP server acts for, as its hooks recorded it); ``waiter`` (the
background waiter Claude Code's ``Stop`` hook arms); ``listener`` (the reference listener
on a session's socket, ``inbox listen``).

May import: ``bus.api`` and anything below it, as every surface.
"""
