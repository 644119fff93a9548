"""The synthesize job: calibration, disjoint batches, epsilon 0, and the sampled distribution."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy import stats

import tinylm
import tokendp
from tokendp.accounting import (amin_epsilon, amin_switch_clip, amin_switch_epsilon, compose_zcdp, invisibleink_clip,
                                invisibleink_epsilon, zcdp_to_epsilon)
from tokendp.backends import HFBackend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.jobs.synthesize import ReferenceBatch, Synthesizer, batch_rows, partition, rho_per_token, synthesize
from tokendp.text.prompt_pair import synthesis_prompts

REFS = [f"Patient {i} was admitted to St James's on {i} June with chest pain." for i in range(10)]
DOMAIN = "a hospital note"


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer())


class Spy:
    """Records the rows every prefill call receives."""

    def __init__(self, backend, monkeypatch):
        self.sequences = []
        real = backend.prefill

        def prefill(sequences, **kwargs):
            self.sequences += list(sequences)
            return real(sequences, **kwargs)

        monkeypatch.setattr(backend, "prefill", prefill)


def test_partition_is_disjoint_and_refuses_reuse():
    batches = partition(11, batch_size=3)
    assert batches == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    assert partition(11, batch_size=3, num=2) == batches[:2]
    with pytest.raises(InvalidParameterError, match="at most 3"):
        partition(11, batch_size=3, num=4)
    with pytest.raises(InvalidInputError, match="cannot fill one batch"):
        partition(2, batch_size=3)


def test_each_reference_reaches_exactly_one_row_and_row_zero_is_public(backend, monkeypatch):
    spy = Spy(backend, monkeypatch)
    out = synthesize(REFS, epsilon=4.0, delta=1e-5, references_per_text=3, max_new_tokens=4, model=backend,
                     domain=DOMAIN, seed=0, concurrency=2)
    assert [o.references for o in out] == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
    assert len(spy.sequences) == 3 and len(spy.sequences[0]) == 4  # 1 public + B private rows
    tok = backend.tokenizer
    ref_ids = [tuple(tok(r, add_special_tokens=False)["input_ids"]) for r in REFS]

    def contains(row, ids):
        return any(row[i:i + len(ids)] == ids for i in range(len(row) - len(ids) + 1))

    seen = [sum(contains(row.ids, ids) for seq in spy.sequences for row in seq.rows) for ids in ref_ids]
    assert seen == [1] * 9 + [0]  # reference 9 does not fit a fourth batch and is never read
    for seq, o in zip(spy.sequences, out):
        assert not any(contains(seq.rows[0].ids, ref_ids[i]) for i in range(10))
        assert [next(i for i in range(10) if contains(row.ids, ref_ids[i])) for row in seq.rows[1:]] == list(o.references)


@pytest.mark.parametrize("switch", [{}, dict(method="amin", svt_epsilon=0.5)])
def test_a_text_depends_on_the_seed_its_index_and_its_batch_only(backend, switch):
    """Text j samples (and draws its switch noise) from document_seed(seed, j)'s stream: written
    alone, or with the other batches in reverse order, it is the same text."""
    common = dict(epsilon=4.0, delta=1e-5, model=backend, domain=DOMAIN, **switch)
    whole = synthesize(REFS[:8], seed=5, references_per_text=2, max_new_tokens=6, **common)
    synth = Synthesizer(batch_size=2, max_tokens=6, **common)
    batches = [ReferenceBatch(j, (2 * j, 2 * j + 1), tuple(REFS[2 * j:2 * j + 2])) for j in range(4)]
    alone = synth(batches[2:3], seed=5)
    backwards = synth(batches[::-1], seed=5)[::-1]
    assert [(o.text, o.private_tokens) for o in backwards] == [(o.text, o.private_tokens) for o in whole]
    assert (alone[0].text, alone[0].private_tokens, alone[0].references) == (whole[2].text, whole[2].private_tokens, (4, 5))
    assert len({o.text for o in whole}) > 1  # the streams differ between texts
    with pytest.raises(InvalidInputError, match="holds 1 references, not batch_size 2"):
        synth([ReferenceBatch(0, (0,), (REFS[0],))])


@pytest.mark.parametrize("kind", ["chat", "plain", "tokendp.json"])
def test_prompts_follow_the_model_kind(monkeypatch, kind):
    """Chat models get the instruction pair in their chat template (the public row: the request
    alone), plain ones a plain template (or --prompt), and a model with a tokendp.json its
    template with the placeholder as the public document."""
    tok = tinylm.tokenizer(chat=kind == "chat")
    options = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"} if kind == "tokendp.json" else {}
    backend = HFBackend(tinylm.model(), tok, options=options)
    spy = Spy(backend, monkeypatch)
    prompt = "Example: {document}\nAnother one:" if kind == "plain" else None
    synthesize(REFS[:2], epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=2, model=backend, seed=0,
               prompt=prompt, domain="a text" if kind == "chat" else None)
    public, private = (tok.decode(row.ids) for row in spy.sequences[0].rows[:2])
    expected = {"chat": ("<|doc|>user: ", "\n<|rewrite|>"),
                "plain": ("Example: ", "\nAnother one:"),
                "tokendp.json": ("<|doc|>", "<|rewrite|>")}[kind]
    assert public.startswith(expected[0]) and public.endswith(expected[1])
    assert private.startswith(expected[0]) and private.endswith(expected[1]) and REFS[0] in private
    assert (public == "<|doc|><|mask|><|rewrite|>") == (kind == "tokendp.json")
    assert REFS[0] not in public
    if kind == "chat":
        assert public == "<|doc|>user: Write an example of a text. Reply with the text only.\n<|rewrite|>"
        assert private.startswith("<|doc|>user: Here is an example of a text:\n\n" + REFS[0])


def test_public_row_is_the_same_for_every_batch_and_any_references(monkeypatch):
    """The public row is a function of the domain and the model only: equal across batches and
    across reference sets, and it holds no reference token sequence."""
    tok = tinylm.tokenizer(chat=True)
    backend = HFBackend(tinylm.model(), tok)
    spy = Spy(backend, monkeypatch)
    others = [t.upper() for t in REFS]
    for refs in (REFS, others):
        synthesize(refs[:4], epsilon=2.0, delta=1e-5, references_per_text=2, max_new_tokens=2, model=backend, seed=0,
                   domain="a hospital note")
    publics = {seq.rows[0].ids for seq in spy.sequences}
    assert len(spy.sequences) == 4 and publics == {synthesis_prompts(tok, domain="a hospital note").public}
    public = tok.decode(list(publics.pop()))
    assert all(r not in public for r in REFS[:4] + others[:4]) and "hospital note" in public


@pytest.mark.parametrize("method", ["invisibleink", "amin"])
def test_reported_clip_and_epsilon_come_from_the_accountant(backend, method):
    eps, delta, b, t, tau = 3.0, 1e-6, 2, 5, 0.8
    out = synthesize(REFS[:4], epsilon=eps, delta=delta, references_per_text=b, max_new_tokens=t, temperature=tau,
                     method=method, model=backend, domain=DOMAIN, seed=1)
    clip = invisibleink_clip(epsilon=eps, delta=delta, batch_size=b, temperature=tau, max_tokens=t)
    accountant = invisibleink_epsilon if method == "invisibleink" else amin_epsilon
    for o in out:
        assert o.clip == (clip if method == "invisibleink" else clip / 2)
        assert o.epsilon == accountant(clip=o.clip, batch_size=b, temperature=tau, max_tokens=t, delta=delta)
        assert eps - 1e-9 < o.epsilon <= eps
        assert o.epsilon == zcdp_to_epsilon(rho=o.rho, delta=delta) and o.rho == compose_zcdp(  # T rho_tok, rounded up
            [rho_per_token(method=method, clip=o.clip, batch_size=b, temperature=tau)], [t])
        assert (o.batch_size, o.max_tokens, o.delta, o.temperature, o.method) == (b, t, delta, tau, method)


@pytest.mark.parametrize("method", ["invisibleink", "amin"])
def test_epsilon_zero_gives_public_text_that_ignores_the_references(backend, method):
    kwargs = dict(epsilon=0, delta=1e-5, references_per_text=2, max_new_tokens=6, method=method, model=backend,
                  domain=DOMAIN, seed=3)
    a = synthesize(REFS[:4], **kwargs)
    b = synthesize(list(reversed(tinylm.CORPUS[:4])), **kwargs)
    assert [o.clip for o in a] == [0.0, 0.0] and [o.epsilon for o in a] == [0.0, 0.0]
    assert [o.text for o in a] == [o.text for o in b]
    assert all(o.tokens_generated >= 1 for o in a)


def test_module_is_callable_and_validates_parameters(backend):
    out = tokendp.synthesize(REFS[:2], epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=2, model=backend,
                             domain=DOMAIN, seed=0)
    assert len(out) == 1 and out[0].to_dict()["references"] == [0, 1]
    bad = [dict(epsilon=-1), dict(delta=0), dict(references_per_text=0), dict(max_new_tokens=0), dict(temperature=0),
           dict(top_k=0), dict(method="dp-fusion"), dict(method="amin", top_k=5)]
    for change in bad:
        kwargs = dict(epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=2, model=backend,
                      domain=DOMAIN) | change
        with pytest.raises(InvalidParameterError):
            synthesize(REFS[:2], **kwargs)
    with pytest.raises(InvalidInputError):
        synthesize(["ok", " "], epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=2, model=backend,
                   domain=DOMAIN)


# ---------------------------------------------------------------------------- sampled distribution
def _intended_first_token(backend, refs, *, clip, tau, top_k):
    """InvisibleInk's first-token distribution recomputed in float64 from full forward passes.

    DClip (Vinod et al. 2025, Sec. 3): phi = phi_pub + mean_i clip(phi_i - phi_pub, -C, C);
    Top-k+: tokens whose public logit is >= the k-th largest public logit - 2C/B;
    exponential mechanism: softmax(phi / tau) on that set.
    """
    tok = backend.tokenizer
    seq = batch_rows(refs, range(len(refs)), tok, synthesis_prompts(tok, options=backend.options, domain=DOMAIN))
    with torch.inference_mode():
        logits = np.stack([backend.model(input_ids=torch.tensor([r.ids])).logits[0, -1].double().numpy()
                           for r in seq.rows])  # (1+B, V)
    pub, priv = logits[0], logits[1:]
    phi = pub + np.clip(priv - pub, -clip, clip).mean(0)
    keep = pub >= np.sort(pub)[-top_k] - 2 * clip / len(refs)
    z = np.where(keep, phi / tau, -np.inf)
    p = np.exp(z - z.max())
    return p / p.sum()


def _chi_square_pvalue(counts, p):
    """Goodness of fit of ``counts`` to ``p`` (tokens expected < 5 times pooled in one bin)."""
    n = counts.sum()
    support = np.flatnonzero(p > 0)
    big = support[p[support] * n >= 5]
    small = np.setdiff1d(support, big)
    observed = [*counts[big], counts[small].sum()]
    expected = [*(p[big] * n), p[small].sum() * n]
    assert len(big) >= 3
    return stats.chisquare(observed, expected).pvalue


def test_first_tokens_follow_the_intended_distribution(backend):
    """Chi-square test of 300 first tokens from 300 independent batches of the same two texts.

    Significance 1e-4 (seeded, so not flaky); the same counts reject the public model's Top-k
    distribution, so the test has power and the references do move the distribution.
    """
    pair = [tinylm.CORPUS[0], tinylm.CORPUS[2]]
    eps, tau, k = 4.0, 0.7, 8
    first = {}
    out = synthesize(pair * 300, epsilon=eps, delta=1e-5, references_per_text=2, max_new_tokens=1, temperature=tau,
                     top_k=k, model=backend, domain=DOMAIN, seed=11, concurrency=300,
                     on_token=lambda doc, token: first.setdefault(doc, token))
    assert sorted(first) == list(range(300))
    clip = out[0].clip
    p = _intended_first_token(backend, pair, clip=clip, tau=tau, top_k=k)
    counts = np.bincount(list(first.values()), minlength=len(p))
    assert counts[p == 0].sum() == 0  # nothing outside the Top-k+ set
    assert (p > 0).sum() > k  # Top-k+ is larger than the public top-k here
    assert _chi_square_pvalue(counts, p) > 1e-4
    public = _intended_first_token(backend, pair, clip=0.0, tau=tau, top_k=k)
    public = np.where(p > 0, np.maximum(public, 1e-9), 0.0)
    assert _chi_square_pvalue(counts, public / public.sum()) < 1e-6


# ---------------------------------------------------------------------------- mechanism properties the job relies on
def test_dclip_and_top_k_plus_depend_on_public_logits_as_documented():
    """DClip equals its formula; the Top-k+ support is a function of row 0 and holds the public top-k."""
    from tokendp.mechanisms import InvisibleInk

    gen = torch.Generator().manual_seed(0)
    n, b, v, k, clip, tau = 64, 4, 50, 5, 0.7, 0.9
    logits = 3 * torch.randn(n, 1 + b, v, generator=gen, dtype=torch.float64).float()  # (N, 1+B, V)
    other = logits.clone()
    other[:, 1:] = 3 * torch.randn(n, b, v, generator=gen).float()  # same public row, other references
    mech = InvisibleInk(clip=clip, temperature=tau, top_k=k)
    out, out_other = mech.step(logits).logprobs, mech.step(other).logprobs  # (N, V)
    support = torch.isfinite(out)
    assert torch.equal(support, torch.isfinite(out_other))
    assert support.gather(-1, logits[:, 0].topk(k, -1).indices).all()
    pub = logits[:, 0].double()
    phi = pub + (logits[:, 1:].double() - pub[:, None]).clamp(-clip, clip).mean(1)  # (N, V)
    expected = torch.log_softmax(torch.where(support, phi / tau, -torch.inf), -1)
    torch.testing.assert_close(out[support].double(), expected[support], rtol=0, atol=1e-5)


def test_ledger_of_the_job_admits_exactly_max_tokens_tokens():
    from tokendp.errors import BudgetExceededError
    from tokendp.jobs.synthesize import _Job, calibrate_clip

    for method in ("invisibleink", "amin"):
        clip = calibrate_clip(method=method, epsilon=2.0, delta=1e-6, batch_size=4, temperature=1.0, max_tokens=20)
        job = _Job(method, clip, 4, 1.0, None, 2.0, 1e-6, switch=None, generators=[torch.Generator()] * 3)
        for _ in range(20):
            job.charge([0, 1, 2])
        with pytest.raises(BudgetExceededError):
            job.charge([1])
        assert job.ledger.epsilon(1) <= 2.0
        declared = job.mechanism.event(batch_size=4)["reference"].rho  # what the mechanism says it costs
        assert job.event.rho == pytest.approx(declared, rel=1e-12)


# ---------------------------------------------------------------------------- Amin et al.'s sparse-vector switch
def test_switch_clip_epsilon_and_record_come_from_the_accountant(backend):
    eps, delta, b, t, tau, svt = 4.0, 1e-5, 2, 8, 0.9, 0.5
    kwargs = dict(epsilon=eps, delta=delta, references_per_text=b, max_new_tokens=t, temperature=tau, method="amin",
                  model=backend, domain=DOMAIN, seed=1, svt_epsilon=svt)
    out = synthesize(REFS[:6], **kwargs)
    c = t // 4  # the default cap
    clip = amin_switch_clip(epsilon=eps, delta=delta, batch_size=b, temperature=tau, max_private_tokens=c, svt_epsilon=svt)
    for o in out:
        assert o.clip == clip
        assert o.epsilon == amin_switch_epsilon(clip=clip, batch_size=b, temperature=tau, max_private_tokens=c,
                                                svt_epsilon=svt, delta=delta)
        assert eps - 1e-9 < o.epsilon <= eps
        assert (o.svt_epsilon, o.max_private_tokens, o.switch_threshold) == (svt, c, clip)  # threshold default: C
        assert o.rho is None  # the switch's certificate is an RDP curve, not a zCDP rho
        assert 0 <= o.private_tokens <= c
    again = synthesize(REFS[:6], **kwargs)
    assert [(o.text, o.private_tokens) for o in again] == [(o.text, o.private_tokens) for o in out]


def test_switch_that_never_fires_gives_text_that_ignores_the_references(backend):
    kwargs = dict(epsilon=4.0, delta=1e-5, references_per_text=2, max_new_tokens=6, method="amin", model=backend,
                  domain=DOMAIN, seed=3, svt_epsilon=0.5, max_private_tokens=3, switch_threshold=1e9)
    a = synthesize(REFS[:4], **kwargs)
    b = synthesize(list(reversed(tinylm.CORPUS[:4])), **kwargs)
    assert [o.private_tokens for o in a] == [0, 0]
    assert [o.text for o in a] == [o.text for o in b]


def test_switch_job_charges_its_worst_case_before_the_first_token():
    from tokendp.errors import BudgetExceededError
    from tokendp.jobs.synthesize import Switch, _Job, calibrate_clip, certified_epsilon

    switch = Switch(svt_epsilon=0.5, max_private_tokens=3)
    params = dict(method="amin", delta=1e-6, batch_size=4, temperature=1.0, max_tokens=12, switch=switch)
    clip = calibrate_clip(epsilon=2.0, **params)
    certified = certified_epsilon(clip=clip, **params)
    job = _Job("amin", clip, 4, 1.0, None, 2.0, 1e-6, switch, [torch.Generator().manual_seed(j) for j in range(3)])
    assert job.ledger.spent() == pytest.approx({0: certified, 1: certified, 2: certified}, rel=1e-12)
    job.charge([0, 1, 2])  # per step: already paid
    assert job.ledger.spent() == pytest.approx({0: certified, 1: certified, 2: certified}, rel=1e-12)
    with pytest.raises(BudgetExceededError):  # one private token more than c would not fit
        job.ledger.charge({0: job.mechanism.event(batch_size=4)["reference"]})
    assert job.switch.max_positives == 3 and job.switch.noisy_threshold.shape == (3,)


@pytest.mark.parametrize(("change", "message"), [
    (dict(svt_epsilon=0.5), "belongs to method 'amin'"),
    (dict(method="amin", max_private_tokens=1), "pass svt_epsilon"),
    (dict(method="amin", switch_threshold=1.0), "pass svt_epsilon"),
    (dict(method="amin", svt_epsilon=0.0), "svt_epsilon"),
    (dict(method="amin", svt_epsilon=0.5, max_private_tokens=0), "from 1 to max_tokens"),
    (dict(method="amin", svt_epsilon=0.5, max_private_tokens=5), "from 1 to max_tokens"),
    (dict(method="amin", svt_epsilon=0.5, switch_threshold=-1.0), "switch_threshold"),
    (dict(method="amin", svt_epsilon=3.0), "switch alone"),
    (dict(method="amin", svt_epsilon=0.5, epsilon=0), "epsilon 0"),
])
def test_switch_parameters_are_checked_with_clear_messages(backend, change, message):
    kwargs = dict(epsilon=1.0, delta=1e-5, references_per_text=2, max_new_tokens=4, model=backend,
                  domain=DOMAIN) | change
    with pytest.raises(InvalidParameterError, match=message):
        synthesize(REFS[:2], **kwargs)


def test_whether_a_batch_fits_depends_on_the_public_layout_only():
    """The fit check counts every reference at max_reference_tokens, never at its own length: short
    and long references are refused alike, and the message names no reference's length or text."""
    small = HFBackend(tinylm.model(max_positions=128), tinylm.tokenizer())
    outcomes = []
    for refs in (["ok", "fine"], [REFS[0] * 4, REFS[1] * 4]):
        for cap in (8, 120):
            try:
                synthesize(refs, epsilon=2.0, delta=1e-5, references_per_text=2, max_new_tokens=4, model=small,
                           domain=DOMAIN, seed=0, max_reference_tokens=cap)
                outcomes.append((cap, "fits"))
            except InvalidInputError as err:
                assert "St James" not in str(err) and "context of 128" in str(err)
                outcomes.append((cap, "refused"))
    assert outcomes == [(8, "fits"), (120, "refused")] * 2


def test_a_reference_is_cut_to_max_reference_tokens_silently():
    """A message saying that a reference was cut would release one bit of its length."""
    tok = tinylm.tokenizer(chat=True)
    prompts = synthesis_prompts(tok, domain="a letter")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # what a "was cut" warning would be
        seq = batch_rows([REFS[0] * 8], [0], tok, prompts, max_reference_tokens=10)
    assert len(seq.rows[1].ids) == len(prompts.private.wrap(())) + 10 == seq.layout_length
