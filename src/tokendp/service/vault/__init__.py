"""The vault (docs/vault.md): documents stored on the server, released to reader keys under one
lifetime Rényi filter per person (docs/privacy.md, "The vault: one lifetime filter per unit").

- :mod:`~tokendp.service.vault.routes`: the owner's and the readers' HTTP routes;
- :mod:`~tokendp.service.vault.documents`: a document checked before anything is stored;
- :mod:`~tokendp.service.vault.units`: who a span is about (a unit's key);
- :mod:`~tokendp.service.vault.release`: a rewrite, one group per unit, and what every release shares;
- :mod:`~tokendp.service.vault.ask`: an answer from the documents read;
- :mod:`~tokendp.service.vault.retrieval`: which documents an answer reads, from public versions;
- :mod:`~tokendp.service.vault.store`: the vault's tables (documents, units, releases, quotas);
- :mod:`~tokendp.service.vault.tickets` and :mod:`~tokendp.service.vault.heartbeat`: arrival
  order per unit, and this process's lease on its tickets.

The per-request API (``/v1/sanitize`` and the rest) sits beside it in :mod:`tokendp.service`;
both run on the one worker (:mod:`tokendp.service.batching`) and database (:mod:`tokendp.service.db`).
"""
