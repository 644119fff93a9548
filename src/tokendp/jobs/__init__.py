"""The jobs users run, one module each: :mod:`~tokendp.jobs.sanitize` (DP-Fusion rewriting),
:mod:`~tokendp.jobs.generate` (answers from private and untrusted context),
:mod:`~tokendp.jobs.synthesize` (InvisibleInk, Amin et al.), :mod:`~tokendp.jobs.predict`
(PMixED) and :mod:`~tokendp.jobs.finetune` (DP-SGD, ATDP).

The functions themselves are ``tokendp.sanitize``, ``tokendp.generate``, ... (exported lazily
by the package); these modules hold them with their prepare/run steps, reports and helpers.
Nothing is imported here, so ``tokendp.jobs.sanitize`` is always the module.
"""
