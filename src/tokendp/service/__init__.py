"""tokendp as a shared service: ``tokendp serve`` (FastAPI), tenants and API keys, the durable
per-unit privacy budget store, request batching onto one model, and the web page.

Layer: above the jobs (sanitize, synthesize, generate) and below the CLI (docs/design.md). The
budget semantics (protected unit, reservation, crash semantics, composition) are stated in
docs/service.md.
"""
