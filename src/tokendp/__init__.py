"""tokendp: token-level differential privacy for large language models."""

__version__ = "0.1.0"
