"""Which requests share a forward pass: identical parameters (seeds may differ), at most max_batch."""

from __future__ import annotations

from types import SimpleNamespace

from tokendp.service.batching import Job, batches
from tokendp.service.plans import Plan


def job(seed=None, epsilon=8.0, kind="sanitize", **params) -> Job:
    request = SimpleNamespace(seed=seed)
    base = dict(spans=[], method="dp-fusion", alpha=2.0, delta=1e-5, max_new_tokens=20, temperature=1.0, seed=seed,
                groups="by-label", beta=None, epsilon=epsilon)
    return Job(kind, request, plan=Plan(kind, request, {}, {**base, **params}))


def test_identical_parameters_share_a_batch_up_to_max_batch():
    jobs = [job() for _ in range(5)]
    assert [len(b) for b in batches(jobs, 2)] == [2, 2, 1]
    assert sum(batches(jobs, 2), []) == jobs


def test_any_difference_or_another_kind_runs_apart_and_seeds_do_not():
    same = [job(), job(seed=1), job(seed=2)]  # each document has its own stream: seeds need not match
    others = [job(epsilon=4.0), job(alpha=3.0), job(max_new_tokens=21), job(epsilon={"PERSON": 8.0}),
              job(kind="generate")]
    result = batches([same[0], *others, *same[1:]], 8)
    assert result[0] == same
    assert all(len(b) == 1 for b in result[1:]) and len(result) == 1 + len(others)


def test_spans_differ_per_document_and_do_not_split_a_batch():
    a, b = job(), job()
    b.plan.params["spans"] = ["another document's spans"]
    assert batches([a, b], 8) == [[a, b]]
