"""Two helpers that let a batch send's Python work overlap its round trips
(:mod:`bus.services.send_many`): a stream's next chunk parsed on a thread of its own
(:class:`Ahead`), and writes run in order on one writer thread while the caller builds
the next (:class:`Writer`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_END = object()


class Ahead(Generic[T]):
    """``work`` of each item of ``source``, in order, one item ahead on a daemon thread (a
    stream's reader may wait on its input forever: nothing joins it). An error of the
    thread is raised by :meth:`get`, in its place."""

    def __init__(self, work: Callable[[Any], T], source: Iterator[Any]) -> None:
        self._done: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=1)
        self._work, self._source = work, source
        threading.Thread(target=self._run, name="send-ahead", daemon=True).start()

    def _run(self) -> None:
        try:
            for item in self._source:
                self._done.put((self._work(item), None))
        except BaseException as exc:  # raised by get(), in order
            self._done.put((None, exc))
        self._done.put((_END, None))

    def ready(self) -> bool:
        """Whether :meth:`get` answers without waiting."""
        return not self._done.empty()

    def get(self) -> tuple[bool, T | None]:
        """``(True, the next result)``, or ``(False, None)`` at the end."""
        got, exc = self._done.get()
        if exc is not None:
            raise exc
        if got is _END:
            return False, None
        return True, got


class Writer:
    """Jobs run one after the other, in the order submitted, on one daemon thread; once a
    job fails, the jobs after it do not run (their futures raise the same error), as a
    loop of them would have stopped."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="send-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, fut = job
            if self._failed is not None:
                fut.set_exception(self._failed)
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # the caller's future raises it
                self._failed = exc
                fut.set_exception(exc)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        fut: Future[T] = Future()
        self._jobs.put((fn, fut))
        return fut

    def close(self) -> None:
        """No more jobs: the thread ends after those queued."""
        self._jobs.put(None)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
