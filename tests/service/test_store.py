"""The budget store, keys and composition without a server: atomic reservations, no refunds,
hashed keys, and the RDP composition across requests against the accountant."""

from __future__ import annotations

import math
import sqlite3
import threading

import pytest

from tokendp.accounting import dp_fusion_epsilon, dp_fusion_rdp_per_token, zcdp_to_epsilon
from tokendp.errors import InvalidParameterError
from tokendp.service import composition
from tokendp.service.composition import Charge
from tokendp.service.db import open_db
from tokendp.service.keys import authenticate, create_key, hash_key
from tokendp.service.limits import RateLimiter
from tokendp.service.store import BudgetRefused, BudgetStore

DELTA = 1e-5


def fusion_charge(alpha=2.0, beta=0.05, groups=1, tokens=10) -> Charge:
    return Charge("rdp", tokens * dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=groups), alpha)


# ---------------------------------------------------------------------------- composition
def test_one_request_costs_exactly_its_certified_epsilon():
    for alpha, beta, m, t in [(2.0, 0.05, 1, 10), (3.5, 0.1, 3, 40), (1.25, 0.01, 8, 300)]:
        want = dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=t, delta=DELTA)
        assert composition.epsilon([fusion_charge(alpha, beta, m, t)], delta=DELTA) == pytest.approx(want, rel=1e-12)


def test_requests_at_one_order_pay_the_conversion_offset_once():
    one = fusion_charge(tokens=10)
    k = 4
    assert composition.epsilon([one] * k, delta=DELTA) == pytest.approx(
        dp_fusion_epsilon(alpha=2.0, beta=0.05, groups=1, max_tokens=10 * k, delta=DELTA), rel=1e-12)
    assert composition.epsilon([one] * k, delta=DELTA) < k * composition.epsilon([one], delta=DELTA)


def test_requests_at_different_orders_compose_at_the_smaller_order():
    low, high = fusion_charge(alpha=2.0), fusion_charge(alpha=8.0, beta=0.02)
    got = composition.epsilon([low, high], delta=DELTA)
    # high's bound holds at every order <= 8 (Renyi divergence grows with the order), so at 2:
    at_two = low.value + high.value + math.log1p(-1 / 2) - (math.log(DELTA) + math.log(2)) / (2 - 1)
    assert got <= at_two + 1e-12 and math.isfinite(got)


def test_zero_charges_cost_nothing_and_zcdp_uses_the_exact_conversion():
    assert composition.epsilon([], delta=DELTA) == 0.0
    assert composition.epsilon([Charge("rdp", 0.0, 2.0)] * 3, delta=DELTA) == 0.0
    rho = 0.05
    assert composition.epsilon([Charge("zcdp", rho)] * 2, delta=DELTA) == pytest.approx(
        zcdp_to_epsilon(rho=2 * rho, delta=DELTA), rel=1e-12)


def test_a_charge_must_be_well_formed():
    for bad in [("rdp", 1.0, None), ("rdp", -1.0, 2.0), ("zcdp", math.inf, None), ("pure", 1.0, None)]:
        with pytest.raises(ValueError):
            Charge(*bad)


# ---------------------------------------------------------------------------- store
@pytest.fixture
def db(tmp_path):
    return tmp_path / "budget.db"


def tenant_with_room_for(db, n: int, charge: Charge):
    budget = (composition.epsilon([charge] * n, delta=DELTA) + composition.epsilon([charge] * (n + 1), delta=DELTA)) / 2
    return create_key(open_db(db), "acme", budget=budget, delta=DELTA)[1]


def test_fifty_threads_reserving_against_room_for_five_get_exactly_five(db):
    charge = fusion_charge()
    tenant = tenant_with_room_for(db, 5, charge)
    stores = [BudgetStore(db) for _ in range(2)]  # two "processes" on one file
    outcomes, barrier = [], threading.Barrier(50)

    def one(i):
        barrier.wait()
        try:
            stores[i % 2].reserve(tenant, "sanitize", {("doc", "PERSON"): charge})
            outcomes.append("ok")
        except BudgetRefused:
            outcomes.append("refused")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] * 5 + ["refused"] * 45
    (unit,) = stores[0].units(tenant)
    assert unit.requests == 5 and unit.spent <= tenant.budget


def test_a_refusal_names_the_unit_and_writes_nothing(db):
    charge = fusion_charge()
    tenant = tenant_with_room_for(db, 1, charge)
    store = BudgetStore(db)
    store.reserve(tenant, "sanitize", {("doc", "PERSON"): charge})
    with pytest.raises(BudgetRefused) as refused:
        store.reserve(tenant, "sanitize", {("doc", "DATETIME"): charge, ("doc", "PERSON"): charge})
    assert refused.value.unit == ("doc", "PERSON") and refused.value.after > tenant.budget
    assert [(u.group, u.requests) for u in store.units(tenant)] == [("PERSON", 1)]  # DATETIME not charged either
    assert store.requests(tenant) == {"reserved": 1}


def test_reservations_are_never_refunded(db):
    charge = fusion_charge()
    tenant = tenant_with_room_for(db, 3, charge)
    store = BudgetStore(db)
    ids = [store.reserve(tenant, "sanitize", {("doc", "PERSON"): charge}) for _ in range(3)]
    store.finish(ids[0], "spent")
    store.finish(ids[1], "failed")
    assert BudgetStore(db).recover() == 1  # ids[2]: a crash left it reserved
    assert store.requests(tenant) == {"spent": 1, "failed": 1, "interrupted": 1}
    (unit,) = store.units(tenant)
    assert unit.requests == 3 and unit.spent == pytest.approx(composition.epsilon([charge] * 3, delta=DELTA))
    with pytest.raises(BudgetRefused):
        store.reserve(tenant, "sanitize", {("doc", "PERSON"): charge})


def test_the_database_is_in_wal_mode(db):
    BudgetStore(db)
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# ---------------------------------------------------------------------------- keys and limits
def test_keys_are_stored_as_hashes_and_authenticate_their_tenant(db):
    conn = open_db(db)
    key, tenant = create_key(conn, "acme", budget=5.0)
    other, _ = create_key(conn, "acme")
    assert key != other and key.startswith("tdp_")
    stored = [r[0] for r in conn.execute("SELECT key_hash FROM api_keys")]
    assert hash_key(key) in stored and key not in stored
    assert all(key.encode() not in f.read_bytes() for f in db.parent.glob(db.name + "*"))  # the file and its WAL
    assert authenticate(conn, key).tenant == tenant == authenticate(conn, other).tenant
    assert authenticate(conn, key).role == "owner" and authenticate(conn, key).key_hash == hash_key(key)
    assert authenticate(conn, key + "x") is None


def test_a_tenants_budget_is_fixed_once_created(db):
    conn = open_db(db)
    create_key(conn, "acme", budget=5.0)
    with pytest.raises(InvalidParameterError, match="fixed"):
        create_key(conn, "acme", budget=50.0)
    with pytest.raises(InvalidParameterError):
        create_key(conn, "bad name!", budget=1.0)


def test_the_rate_limiter_admits_n_per_sliding_minute():
    limiter = RateLimiter(3)
    assert [limiter.admit("k", now=t) for t in (0, 1, 2)] == [None, None, None]
    assert limiter.admit("k", now=30) == pytest.approx(30)
    assert limiter.admit("other", now=30) is None
    assert limiter.admit("k", now=60.5) is None


def test_composition_is_never_above_the_sum_of_the_requests_own_epsilons():
    import random

    from tokendp.fusion import ALPHA_GRID

    rng = random.Random(0)
    for _ in range(300):
        charges = [fusion_charge(alpha=rng.choice(ALPHA_GRID), beta=rng.uniform(1e-4, 0.2), groups=rng.randint(1, 8),
                                 tokens=rng.randint(1, 500)) for _ in range(rng.randint(1, 6))]
        delta = rng.choice([1e-3, 1e-5, 1e-8])
        alone = sum(composition.epsilon([c], delta=delta) for c in charges)
        assert composition.epsilon(charges, delta=delta) <= alone + 1e-9
