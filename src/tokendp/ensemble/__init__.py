"""PMixED's ensemble: N LoRA adapters fine-tuned on disjoint shards of a private corpus.

``manifest`` reads and writes the ensemble directory's ``manifest.json`` (public facts only:
base model, shard names, counts, hyper-parameters; never any text); ``train`` splits a corpus
into shards and trains one adapter per shard (``tokendp ensemble train``).
"""

from tokendp.ensemble.manifest import MANIFEST_FILE, Manifest, ShardInfo, read_manifest

__all__ = ["MANIFEST_FILE", "Manifest", "ShardInfo", "read_manifest"]
