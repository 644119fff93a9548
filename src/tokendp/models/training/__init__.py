"""Training of the embedded default model (tokenizer, data, objective, loop, export).

Needs the ``train`` extra (Faker). Nothing here runs at import time of ``tokendp.models``.
"""
