"""``/v1/tag`` in a process of its own, away from the model's thread.

Tagging is pure Python (regular expressions, CRF features) and holds the GIL the whole time.
On the model's thread, one 0.9 MB tag request stalled another tenant's sanitize until it was
done; on a second thread of the server's process, a 1 MB text still slowed a concurrent
sanitize on the tiny model 7-fold, since every torch operation waits for the GIL on its way
back. One worker process with its own tagger shares nothing with generation but the CPU. The
model's worker keeps its own tagger for sanitize and generate requests that give no spans.

A tagger process that dies (killed, out of memory) fails the request it held and the requests
queued behind it (500 internal_error); the next request starts a fresh process. A tagger process
whose server died (``kill -9``) exits within a second or so: nothing else would end it.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any


class Tagging:
    """The tagger process of one server (started lazily, warmed at :meth:`start`)."""

    def __init__(self, tagger: str) -> None:
        self.tagger = tagger
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the process and load its tagger now, so that the first request does not wait
        for it (a tagger that fails to load fails each request with its own error)."""
        self._executor().submit(_warm, self.tagger)

    def stop(self) -> None:
        """Cancel queued requests, let the running one end (at most ``--max-tag-chars``), and
        join the process, so that its queues are released before the server exits."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    async def tag(self, text: str) -> list[dict[str, Any]]:
        """The tagger's spans of ``text`` as dicts."""
        pool = self._executor()
        try:
            return await asyncio.wrap_future(pool.submit(_tag, self.tagger, text))
        except BrokenProcessPool:
            self._discard(pool)
            raise

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn, not fork: the server's process holds threads (the model's, torch's) that
                # a forked child would inherit in whatever state they were.
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_child, initargs=(os.getpid(),))
            return self._pool

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)


# --- in the tagger process -----------------------------------------------------------------------
def _start_child(server: int) -> None:
    """Ignore Ctrl-C, which reaches the whole process group (the server shuts its tagger process
    down itself), and exit once the server is gone: the process holds both ends of its own work
    queue, so a dead server's closed pipe would never wake it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(server,), name="tokendp-tagger-watch", daemon=True).start()


def _exit_with(server: int, every_s: float = 0.5) -> None:
    while os.getppid() == server:
        time.sleep(every_s)
    os._exit(0)


@functools.cache
def _load(name: str) -> Any:
    from tokendp.text.taggers import get_tagger

    return get_tagger(name)


def _warm(name: str) -> None:
    _load(name)


def _tag(name: str, text: str) -> list[dict[str, Any]]:
    from tokendp.text.taggers import tag

    return [span.to_dict() for span in tag(text, tagger=_load(name))]
