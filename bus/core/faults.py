"""Fault-injection points for crash tests: ``INBOX_FAULT=drain:after_claim`` (comma-
separated for several) makes the process SIGKILL itself when it reaches that point.

Points: ``drain:after_claim`` (the floor file is claimed, nothing read), ``drain:after_log``
(the lines are in log.jsonl, the claim not yet deleted), ``drain:after_unlink`` (the claim
is deleted, the marks not yet recorded), ``notice:after_append`` (the worker wrote a
notice to the floor file and has not recorded it), ``notice:after_ack`` (a listener acked
a notice on the session's socket, the worker has not recorded it), ``kick:after_pop`` (a worker's delivery
loop popped a kick off the host's kick list, nothing delivered; bus/delivery/kick_list.py),
``kick:after_ahead`` (a lone delivery's notice records and the loop's next wait written,
their replies not read),
``wake:before_cmd`` (a wake set the session running, its wake command not yet run),
``upgrade:after_cursors`` (the reader subscriptions' migration moved their cursors, the old
records not yet dropped, the data version not yet stamped; bus/ops/migrations.py).
"""

from __future__ import annotations

import os
import signal


def point(name: str) -> None:
    """Die here, as a crash or an OOM kill would, if ``INBOX_FAULT`` names ``name``."""
    spec = os.environ.get("INBOX_FAULT")
    if spec and name in spec.split(","):
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["point"]
