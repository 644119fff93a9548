"""A server process's lease on its vault tickets: a thread that renews it every ``lease / 6``
seconds (:meth:`tokendp.service.vault.store.VaultStore.beat`), so that a process keeps its
tickets through five missed beats, and a process that died loses them one lease after its last
beat (docs/privacy.md, "The vault: one lifetime filter per unit", step 4)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("tokendp.service")
BEATS_PER_LEASE = 6


class Heartbeat:
    """Renew ``vault``'s lease from :meth:`start` to :meth:`stop`; stopping gives it up."""

    def __init__(self, vault) -> None:
        self.vault = vault
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tokendp-heartbeat", daemon=True)

    def start(self) -> None:
        self.vault.beat()  # registered before any ticket is taken
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.vault.leave()
        except Exception as err:  # the lease then lapses on its own
            log.warning("could not give up the vault lease: %s", type(err).__name__)

    def _run(self) -> None:
        while not self._stop.wait(self.vault.lease / BEATS_PER_LEASE):
            try:
                self.vault.beat()
            except Exception as err:  # a missed beat; the lease allows several
                log.warning("vault heartbeat failed: %s", type(err).__name__)
