#!/usr/bin/env python3
"""Verify an evidence bundle (`dlqctl evidence export`) without this project's code.

Python 3.9+, standard library only. It re-implements the formats docs/evidence.md specifies under
"Audit evidence: formats" from that text alone: the canonical record form, the record hash, the
seal's canonical form and digest, the Merkle tree over chain heads and its inclusion proofs. It
checks that every record hashes and links, every chain ends at the head its last seal commits
to, the seals form one chain from the first (no gap, each naming the digest of the one before,
each key agreeing with its content), every seal's root is the root of its heads, every proof
leads to its seal's root, every sealed head is the record at that position, and the
reconciliation's totals per state are those of its own population.

Usage: verify_bundle.py BUNDLE.json   (exit 0: verified; 1: broken; 2: unreadable)
"""

import hashlib
import json
import re
import sys
from decimal import Decimal, Inexact, InvalidOperation, getcontext

# Sums are exact (the project's totals never round): enough digits, and rounding is an error.
getcontext().prec = 200
getcontext().traps[Inexact] = True

GENESIS = "0" * 64
RECORD_TAG = b"recon-audit/v2 record"
SEAL_TAG = b"recon-audit/v2 seal"
BUNDLE_SCHEMA = "recon-dlq/evidence-bundle/v2"
SEAL_SCHEMA = "recon-dlq/audit-seal/v2"
SEAL_KEY = re.compile(r"audit-seals/([0-9a-f]{16})/([0-9]{20})\.json\Z", re.ASCII)
TIME = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.([0-9]{1,9}))?(?:Z|\+00:00)\Z", re.ASCII)


def json_string(s):
    """The canonical string: '"' and '\\' escaped, U+0000-U+001F as \\u00xx, the rest as is."""
    if not isinstance(s, str):
        raise TypeError("expected a string, found %r" % (s,))
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def integer(v):
    """A JSON integer, written in decimal (a boolean, a float or a string is not one)."""
    if type(v) is not int or v < 0:
        raise TypeError("expected a whole number, found %r" % (v,))
    return str(v)


def canonical_time(text):
    if not isinstance(text, str):
        raise TypeError("expected a time, found %r" % (text,))
    m = TIME.match(text)
    if not m:
        raise ValueError("not a UTC time: %r" % (text,))
    return "%s.%sZ" % (m.group(1), (m.group(2) or "").ljust(9, "0"))


def obj(fields):
    return "{" + ",".join(json_string(k) + ":" + v for k, v in fields) + "}"


def opt(v):
    return "null" if v is None else json_string(v)


def canonical_record(r):
    # `period` is written last, and only when the record has one (records from before it hash
    # as they did).
    period = [("period", json_string(r["period"]))] if r.get("period") is not None else []
    return obj([
        ("audit_id", json_string(r["audit_id"])),
        ("kind", json_string(r["kind"])),
        ("at", json_string(canonical_time(r["at"]))),
        ("actor", json_string(r["actor"])),
        ("sqs_message_id", json_string(r["sqs_message_id"])),
        ("message_id", opt(r.get("message_id"))),
        ("trace_id", opt(r.get("trace_id"))),
        ("source_hash", opt(r.get("source_hash"))),
        ("match_decision", opt(r.get("match_decision"))),
        ("failure_code", opt(r.get("failure_code"))),
        ("root_cause", opt(r.get("root_cause"))),
        ("attempt_count", integer(r["attempt_count"])),
        ("ledger_entity", opt(r.get("ledger_entity"))),
        ("currency", opt(r.get("currency"))),
        ("amount", opt(r.get("amount"))),
        ("detail", json_string(r.get("detail", ""))),
        ("replay_of", opt(r.get("replay_of"))),
    ] + period)


def record_hash(r):
    parts = [RECORD_TAG, canonical_record(r).encode(), r["chain"].encode(),
             integer(r["seq"]).encode(), r["prev_hash"].encode()]
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


def canonical_seal(s):
    heads = ",".join(obj([("chain", json_string(h["chain"])), ("seq", integer(h["seq"])),
                          ("hash", json_string(h["hash"]))]) for h in s["heads"])
    return obj([
        ("schema", json_string(s["schema"])),
        ("trail", json_string(s["trail"])),
        ("seq", integer(s["seq"])),
        ("prev", json_string(s["prev"])),
        ("at", json_string(canonical_time(s["at"]))),
        ("heads", "[" + heads + "]"),
        ("root", json_string(s["root"])),
    ])


def seal_digest(body_bytes):
    return hashlib.sha256(SEAL_TAG + b"\x00" + body_bytes).hexdigest()


def leaf(h):
    return hashlib.sha256(b"\x00" + ("%s:%d:%s" % (h["chain"], h["seq"], h["hash"])).encode()).digest()


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_root(heads):
    level = [leaf(h) for h in heads]
    if not level:
        return GENESIS
    while len(level) > 1:
        level = [node(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0].hex()


def proof_root(head, path):
    cur = leaf(head)
    for step in path:
        sib = bytes.fromhex(step["hash"])
        if len(sib) != 32 or step["side"] not in ("left", "right"):
            return None
        cur = node(sib, cur) if step["side"] == "left" else node(cur, sib)
    return cur.hex()


PLAIN_DECIMAL = re.compile(r"-?([0-9]+)(?:\.([0-9]+))?\Z", re.ASCII)


def plain_decimal(text):
    """An amount as the message contract (docs/contract.md) reads it: a plain decimal, at most 28
    significant digits; anything else counts as "without amount"."""
    m = PLAIN_DECIMAL.match(text or "")
    if not m or len(m.group(1).lstrip("0")) + len(m.group(2) or "") > 28:
        return None
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def verify(bundle):
    breaks = []
    if bundle.get("schema") != BUNDLE_SCHEMA:
        breaks.append("schema is %r, not %s" % (bundle.get("schema"), BUNDLE_SCHEMA))
    breaks.extend("bucket: " + f for f in bundle.get("worm_findings", []))
    trail = bundle["trail"]

    # 1. Every chain: hashes, links, no gap, ending at its head.
    chains = {}
    for r in bundle["audit_records"]:
        chains.setdefault(r["chain"], []).append(r)
    heads = {h["chain"]: h for h in bundle["heads"]}
    for name in sorted(set(chains) | set(heads)):
        records = sorted(chains.get(name, []), key=lambda r: r["seq"])
        prev, seq = GENESIS, 1
        for r in records:
            where = "chain %s, record %d (%s)" % (name, r["seq"], r["audit_id"])
            if r["seq"] != seq:
                breaks.append("chain %s: record %d is missing" % (name, seq))
                break
            if r["prev_hash"] != prev:
                breaks.append(where + ": its prev_hash is not the hash of the record before it")
                break
            try:
                recomputed = record_hash(r)
            except (KeyError, ValueError, TypeError) as e:
                breaks.append(where + ": does not read as a record (%s)" % e)
                break
            if recomputed != r["hash"]:
                breaks.append(where + ": its content does not match its hash (modified)")
                break
            prev, seq = r["hash"], seq + 1
        else:
            h = heads.get(name)
            if h is None or h["seq"] != seq - 1 or (seq > 1 and h["hash"] != prev):
                breaks.append("chain %s: ends at record %d, its head says otherwise" % (name, seq - 1))

    # 2. The seal chain, each seal's root and proofs, every sealed head.
    if not bundle["seals"]:
        breaks.append("the bundle carries no seal: nothing anchors its records")
    by_position = {(r["chain"], r["seq"]): r["hash"] for r in bundle["audit_records"]}
    expected_seq, expected_prev, last = 1, GENESIS, None
    for stored in sorted(bundle["seals"], key=lambda s: s["key"]):
        key, body = stored["key"], stored["body"]
        m = SEAL_KEY.match(key)
        if not m or m.group(1) != trail:
            breaks.append("seal %s: not a seal key of trail %s" % (key, trail))
            continue
        seq = int(m.group(2))
        if seq != expected_seq:
            breaks.append("seal %d is missing (the next present is %d)" % (expected_seq, seq))
        try:
            seal = json.loads(body)
            canonical = canonical_seal(seal)
        except (ValueError, KeyError, TypeError) as e:
            breaks.append("seal %s does not parse: %s" % (key, e))
            expected_seq, expected_prev = seq + 1, seal_digest(body.encode())
            continue
        if canonical != body:
            breaks.append("seal %s is not in its canonical form" % key)
        if seal["schema"] != SEAL_SCHEMA or seal["trail"] != trail or seal["seq"] != seq:
            breaks.append("seal %s: key and content disagree" % key)
        if seq == expected_seq and seal["prev"] != expected_prev:
            breaks.append("seal %s does not name the digest of the seal before it" % key)
        chain_names = [h["chain"] for h in seal["heads"]]
        if chain_names != sorted(set(chain_names)) or merkle_root(seal["heads"]) != seal["root"]:
            breaks.append("seal %s: its Merkle root is not the root of its heads" % key)
        proofs = {p["chain"]: p for p in stored.get("proofs", [])}
        for h in seal["heads"]:
            p = proofs.get(h["chain"])
            if not p or p["seq"] != h["seq"] or p["hash"] != h["hash"] \
                    or proof_root(h, p["path"]) != seal["root"]:
                breaks.append("seal %s: the proof of chain %s's head does not lead to its root"
                              % (key, h["chain"]))
            if by_position.get((h["chain"], h["seq"])) != h["hash"]:
                breaks.append("seal %s: chain %s record %d is not the record it sealed"
                              % (key, h["chain"], h["seq"]))
        expected_seq, expected_prev, last = seq + 1, seal_digest(body.encode()), seal

    # 3. Every record is covered by the last seal.
    if last is not None:
        sealed = {h["chain"]: h for h in last["heads"]}
        if bundle["heads"] != last["heads"]:
            breaks.append("the bundle's heads are not the heads its last seal commits to")
        for r in bundle["audit_records"]:
            if r["seq"] > sealed.get(r["chain"], {"seq": 0})["seq"]:
                breaks.append("chain %s record %d: no seal in the bundle covers it" % (r["chain"], r["seq"]))

    # 4. The reconciliation's totals per state are those of its own population.
    totals = {}
    for state, entry in bundle["outcomes"]:
        t = totals.setdefault(state, {"count": 0, "amounts": {}, "without_amount": 0})
        t["count"] += 1
        amount = plain_decimal(entry.get("amount"))
        currency = entry.get("currency")
        if amount is None or currency is None:
            t["without_amount"] += 1
        else:
            c = "".join(ch.upper() if "a" <= ch <= "z" else ch for ch in currency)
            t["amounts"][c] = t["amounts"].get(c, Decimal(0)) + amount
    claimed = bundle["reconciliation"]["by_state"]
    for state in sorted(set(totals) | set(claimed)):
        mine, theirs = totals.get(state), claimed.get(state)
        same = mine is not None and theirs is not None \
            and mine["count"] == theirs["count"] and mine["without_amount"] == theirs["without_amount"] \
            and mine["amounts"] == {c: Decimal(a) for c, a in theirs["amounts"].items()}
        if not same:
            breaks.append("reconciliation, state %s: its totals are not those of its population" % state)
    return breaks, len(bundle["audit_records"]), len(bundle["seals"])


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as f:
            bundle = json.load(f)
        breaks, records, seals = verify(bundle)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("cannot read %s as an evidence bundle: %s" % (argv[1], e), file=sys.stderr)
        return 2
    print("bundle %s: %d audit records, %d seals, trail %s" % (argv[1], records, seals, bundle["trail"]))
    for b in breaks:
        print("  BROKEN: " + b)
    if breaks:
        print("NOT VERIFIED (%d breaks)" % len(breaks))
        return 1
    print("verified: every record hashes and links, every seal chains and holds, every proof leads to its root")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
