"""The canonical source_hash (docs/contract.md, "source_hash"), in plain Python for the benchmarks' messages:
the hashed text built from field values already valid (the amount in its canonical text)."""

import hashlib

FIELDS = ("ledger_entity", "external_ref", "counterparty", "value_date", "currency", "amount")


def source_hash(ledger_entity: str, external_ref: str, counterparty: str, value_date: str, currency: str, amount: str) -> str:
    values = (ledger_entity.upper(), external_ref.strip(), counterparty.strip(), value_date, currency.upper(), amount)
    text = "recon-source-hash/v1;" + "".join(f"{k}={len(v.encode())}:{v};" for k, v in zip(FIELDS, values))
    return hashlib.sha256(text.encode()).hexdigest()
