"""Which requests share a forward pass: prepared jobs with equal decoding settings, at most max_batch;
each document keeps its own certificate (alpha, betas, T) inside the batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokendp.fusion import PreparedFusion
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize
from tokendp.service.batching import Job, batches
from tokendp.service.plans import Plan, charges_of

from tests.service.conftest import LETTER, PERSONS


@pytest.fixture(scope="module")
def tiny():
    from tokendp.backends import load_backend

    return load_backend("tiny")


def job(tiny, kind="sanitize", **options) -> Job:
    settings = dict(epsilon=None if "beta" in options else 8.0, max_new_tokens=20) | options
    prepared = prepare_sanitize([LETTER], spans=[PERSONS], model=tiny, config=SanitizeConfig(**settings))
    request = SimpleNamespace(id="doc", seed=None)
    return Job(kind, request, plan=Plan(kind, request, prepared, charges_of("sanitize", "doc", prepared)))


def test_equal_settings_share_a_batch_up_to_max_batch(tiny):
    jobs = [job(tiny) for _ in range(5)]
    assert [len(b) for b in batches(jobs, 2)] == [2, 2, 1]
    assert sum(batches(jobs, 2), []) == jobs


def test_budgets_orders_and_lengths_share_a_batch_decoding_settings_do_not(tiny):
    same = [job(tiny), job(tiny, epsilon=4.0), job(tiny, alpha=3.0), job(tiny, max_new_tokens=21),
            job(tiny, epsilon={"PERSON": 2.0})]
    others = [job(tiny, temperature=0.5), job(tiny, delta=1e-6), job(tiny, method="public", epsilon=None),
              job(tiny, no_repeat_ngram_size=3), job(tiny, kind="generate")]
    result = batches([same[0], *others, *same[1:]], 8)
    assert result[0] == same
    assert all(len(b) == 1 for b in result[1:]) and len(result) == 1 + len(others)


def test_a_batch_keeps_every_documents_own_certificate(tiny):
    a, b = job(tiny, epsilon=4.0), job(tiny, alpha=3.0, beta=0.01)
    merged = PreparedFusion.concat([a.plan.job, b.plan.job])
    assert merged.documents == (*a.plan.job.documents, *b.plan.job.documents)
    assert charges_of("sanitize", "doc", a.plan.job) != charges_of("sanitize", "doc", b.plan.job)
    with pytest.raises(ValueError):
        PreparedFusion.concat([a.plan.job, job(tiny, temperature=0.5).plan.job])
