"""Whether the store refuses writes now, from its INFO (bus.core.store_faults): a part of
both the store and the read lane's lite store (no redis-py here)."""

from __future__ import annotations

from bus.core.store_faults import StoreFault, fault_of_info

from .base import StorePart


class WriteFaultStore(StorePart):
    def write_fault(self) -> StoreFault | None:
        """What makes the store refuse writes now (a failed save or append-only write, a
        replica, full memory), or None. A failed save refuses writes only with
        ``stop-writes-on-bgsave-error`` on: asked when CONFIG answers, else taken as on
        (the server's default)."""
        info: dict[str, object] = {}
        for section in ("persistence", "replication", "memory"):
            info.update(self.r.info(section))
        stop = True
        if str(info.get("rdb_last_bgsave_status", "ok")) != "ok":
            try:
                got = self.r.config_get("stop-writes-on-bgsave-error")
                stop = got.get("stop-writes-on-bgsave-error", "yes") == "yes"
            except Exception:  # CONFIG refused (an ACL), by either client: the default
                pass
        return fault_of_info(info, stop_writes=stop)
