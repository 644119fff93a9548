"""tokendp where people already work: LangChain, LlamaIndex, Presidio and Hugging Face datasets
(docs/integrations.md).

One module per framework, each an optional extra that ``import tokendp`` never imports:
:mod:`tokendp.integrations.langchain` (``pip install "tokendp[langchain]"``),
:mod:`tokendp.integrations.llamaindex` (``[llamaindex]``), :mod:`tokendp.integrations.presidio`
(``[presidio]``) and :mod:`tokendp.integrations.datasets` (``[datasets]``; also
``tokendp.sanitize_dataset``). Importing a module whose framework is missing raises
:class:`~tokendp.errors.MissingDependencyError` naming the extra to install.

Layer: beside the command line, above the jobs, the engines and the service (docs/design.md).
"""
