"""A spare worker (bus.ops.standby): the imports first, then wait for one line on stdin.

    python -m workers.standby --concurrency N [--pool prefork] [--loglevel info]

On the line, this process runs ``inbox worker``'s Celery worker (the same arguments,
:func:`bus.ops.procs.worker_argv`); on end of input it exits 0 having done nothing.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workers.standby")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--pool", default="prefork")
    p.add_argument("--loglevel", default="info")
    args = p.parse_args(argv)
    # What `celery -A workers worker` imports before it connects: done while waiting.
    import billiard.pool  # noqa: F401
    import celery.apps.worker
    import celery.bin.celery
    import celery.concurrency.prefork
    import kombu.transport.redis  # noqa: F401

    import workers.tasks  # noqa: F401
    from bus.core.ids import check_session_id
    from bus.core.settings import Settings
    from bus.ops.procs import worker_argv

    if not sys.stdin.buffer.readline():
        return 0  # dismissed (or the supervisor is gone): nothing was started
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    settings = Settings.from_env()
    check_session_id(settings.host, "host name")
    sys.argv = [
        "celery",
        "-A",
        "workers",
        *worker_argv(settings, args.concurrency, args.pool, args.loglevel),
    ]
    return int(celery.bin.celery.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
