"""The source document's per-message decision path in Python, for a side-by-side figure.

Same work as the Rust `validate/valid_1kb` benchmark: decode a ~1 KB body into the source
document's pydantic `ReconMessage`, recompute the canonical source_hash and compare it, check the
currency's minor units and the accounting period. Prints nanoseconds per message.

Run through `make bench` (it provides a virtualenv with pydantic), or: python3 bench/python_baseline.py
"""

import json
import time
from decimal import Decimal

from pydantic import BaseModel
from source_hash import source_hash

MINOR_UNITS = {"USD": 2, "EUR": 2, "JPY": 0, "BHD": 3}
CLOSED = {("ACME-US", "2026-10")}


class ReconMessage(BaseModel):  # as in the source document, plus the hashed business fields
    message_id: str
    source_hash: str
    ledger_entity: str
    currency: str
    amount: Decimal
    match_decision: str
    trace_id: str
    value_date: str
    external_ref: str
    counterparty: str = ""
    schema_version: int


def canonical_hash(m: ReconMessage) -> str:
    amount = m.amount.normalize()
    amount_text = format(amount, "f") if amount != 0 else "0"
    return source_hash(m.ledger_entity, m.external_ref, m.counterparty, m.value_date, m.currency, amount_text)


def decide(body: str) -> str:
    m = ReconMessage.model_validate_json(body)
    if canonical_hash(m) != m.source_hash.lower():
        return "UNRECOVERABLE_PAYLOAD"
    units = MINOR_UNITS.get(m.currency.upper())
    if units is None:
        return "POISON_MESSAGE"
    if -m.amount.normalize().as_tuple().exponent > units:
        return "POISON_MESSAGE"
    if (m.ledger_entity, m.value_date[:7]) in CLOSED:
        return "POISON_MESSAGE"
    return "COMMIT"


def body(n: int) -> str:
    fields = {
        "schema_version": 1,
        "message_id": f"3f2c9a7e-5d1b-4c8e-9a77-{n:012}",
        "ledger_entity": "ACME-US-OPS",
        "currency": "USD",
        "amount": f"{1000 + n % 90000}.{n % 100:02}",
        "match_decision": "PARTIAL",
        "trace_id": f"1-67a2c3d4-{n:024x}",
        "value_date": "2026-11-27",
        "external_ref": f"CAMT053-20261127-{n:010}",
        "counterparty": "Globex Industrial Supplies GmbH & Co. KG",
    }
    m = ReconMessage(source_hash="0" * 64, **fields)
    fields["source_hash"] = canonical_hash(m)
    fields["remittance_info"] = (
        "INV-2026-118273 INV-2026-118274 INV-2026-118290 partial settlement per agreement ref MSA-77/2024, "
        "short-paid by bank charges; see statement line 4411 for the correction entry and contact AR team"
    )
    fields["bank_statement_line"] = {
        "account": "DE89370400440532013000",
        "booking_date": "2026-11-27",
        "entry_reference": f"E2E-{n:020}",
        "bank_transaction_code": {"domain": "PMNT", "family": "RCDT", "sub_family": "ESCT"},
        "debtor": {"name": "Globex Industrial Supplies GmbH & Co. KG", "iban": "FR1420041010050500013M02606", "bic": "PSSTFRPPXXX"},
        "ultimate_debtor": "Globex Holding SE",
        "purpose": "SUPP",
    }
    fields["matcher"] = {"rule": "amount_tolerance_and_reference", "score": "0.87", "candidates": 3, "version": "2026.11.4"}
    return json.dumps(fields, separators=(",", ":"))


def main() -> None:
    bodies = [body(n) for n in range(2000)]
    assert all(decide(b) == "COMMIT" for b in bodies)
    size = sum(len(b) for b in bodies) / len(bodies)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10):
            for b in bodies:
                decide(b)
        best = min(best, (time.perf_counter() - start) / (10 * len(bodies)))
    print(f"python (pydantic {__import__('pydantic').VERSION}) decision path, {size:.0f}-byte body: {best * 1e9:,.0f} ns/message (best of 5)")


if __name__ == "__main__":
    main()
