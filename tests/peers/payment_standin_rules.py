"""What the Masumi payment node refuses, and in which words: the request rules of payment_standin.py.

Pure functions, no state: each takes a request body (and the stand-in's configuration where the node would
read its database or the chain) and either returns the values the node goes on with or raises `Refusal`
with the status and message the node answers. Sources, as read from the node (masumi-payment-service):
the schemas and handlers of `src/routes/api/payments/` (S1, S2, S4) and `src/routes/api/purchases/` (P1,
P2, P4), the auth middleware of `packages/payment-core`, the hex validator `src/utils/validator/hex.ts`.
Where this file words a message itself (a body that fails the schema: express-zod-api's own texts), it
names the field first, as the node does, and says so below.
"""

import re
from datetime import datetime, timedelta, timezone

HEX = re.compile(r"[0-9a-fA-F]+")
HASH64 = re.compile(r"[0-9a-fA-F]{64}")
DIGITS = re.compile(r"[0-9]+")
# express-zod-api's ez.dateIn(): an ISO 8601 date, time optional, zone optional.
ISO_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})(?:T(\d{2}:\d{2}(?::\d{2})?)(\.\d+)?(Z|[+-]\d{2}:?\d{2})?)?")
NETWORKS = ("Preprod", "Mainnet")
PURCHASE_TIMES = ("payByTime", "submitResultTime", "unlockTime", "externalDisputeUnlockTime")

MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
# createPaymentsSchemaInput's default for payByTime and submitResultTime: new Date(1000*60*60*12), i.e.
# 1970-01-01T12:00:00Z, not "now + 12 h". A request without them fails the time rules.
NODE_DEFAULT_TIME_MS = 12 * HOUR_MS

# What an agentIdentifier is sold as when `_config` has no `agents` registry: a Fixed price, held in a
# selling wallet of this node. The vkey is 56 hex characters, like a payment key hash.
DEFAULT_PRICE = [{"amount": "5000000", "unit": ""}]
DEFAULT_SELLING_VKEY = "5e11e5e11e5e11e5e11e5e11e5e11e5e11e5e11e5e11e5e11e5e11e"
DEFAULT_SELLING_ADDRESS = "addr_test1vstandinsellingwallet0000000000000000000000000000"
DEFAULT_BUYER_VKEY = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
PRICING_TYPES = ("Fixed", "Dynamic", "Free")


class Refusal(Exception):
    """The node's error answer: `status` and the envelope's `error.message`."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def even_hex(value):
    """validateHexString: a non-empty hex string of even length (either case)."""
    return isinstance(value, str) and len(value) % 2 == 0 and HEX.fullmatch(value) is not None


def iso_ms(value, field):
    """An ISO 8601 date string -> Unix milliseconds (a time without a zone is read as UTC). Anything else
    (a number, a string of digits, a malformed date) is the schema's 400."""
    m = ISO_DATE.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise Refusal(400, f"{field}: Expected an ISO 8601 date string")
    day, clock, fraction, zone = m.groups()
    try:
        dt = datetime.fromisoformat(f"{day}T{clock or '00:00'}")
    except ValueError:
        raise Refusal(400, f"{field}: Expected an ISO 8601 date string") from None
    dt = dt.replace(tzinfo=timezone.utc)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        dt -= sign * timedelta(hours=hours, minutes=minutes)
    ms = (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    if fraction:
        ms += int((fraction[1:] + "00")[:3])  # JS Date keeps milliseconds, drops the rest
    return ms


def time_rule_broken(pay_by, submit, unlock, dispute, now_ms):
    """The five time rules of S1 (and P1), in the node's order, with its messages; None if all hold."""
    if pay_by > submit - 5 * MINUTE_MS:
        return "Pay by time must be before submit result time (min. 5 minutes)"
    if pay_by < now_ms - 5 * MINUTE_MS:
        return "Pay by time must be in the future (max. 5 minutes)"
    if dispute < unlock + 15 * MINUTE_MS:
        return "External dispute unlock time must be after unlock time (min. 15 minutes difference)"
    if submit < now_ms + 15 * MINUTE_MS:
        return "Submit result time must be in the future (min. 15 minutes)"
    if submit > unlock - 15 * MINUTE_MS:
        return "Submit result time must be before unlock time with at least 15 minutes difference"
    return None


# ---- keys ---------------------------------------------------------------------------------------------


def key_for(keys, token, need):
    """The auth middleware against `_config` `keys` ({token: {can_pay, can_read, networks}}): the key's
    record, or Refusal 401. `need` is "pay" (canPay) or "read" (canRead, which canPay also grants)."""
    if not isinstance(token, str) or token == "":
        raise Refusal(401, "Unauthorized, no authentication token provided")
    key = keys.get(token)
    if key is None:
        raise Refusal(401, "Unauthorized, invalid authentication token provided")
    allowed = key["can_pay"] if need == "pay" else (key["can_read"] or key["can_pay"])
    if not allowed:
        raise Refusal(401, f"Unauthorized, {'payment' if need == 'pay' else 'read'} access required")
    return key


def check_network(key, network):
    """checkIsAllowedNetworkOrThrowUnauthorized; no key record (keys not configured) allows every network."""
    if key is not None and network not in key["networks"]:
        raise Refusal(401, "Unauthorized, network not allowed")


def normalize_keys(raw):
    """`_config` `keys` with its defaults filled in: can_pay, can_read true, networks both."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("keys must be an object {token: {can_pay, can_read, networks}}")
    out = {}
    for token, k in raw.items():
        k = k or {}
        networks = k.get("networks", list(NETWORKS))
        if not isinstance(networks, list) or any(n not in NETWORKS for n in networks):
            raise ValueError(f"keys.{token}.networks must be a list of {NETWORKS}")
        out[token] = {
            "can_pay": bool(k.get("can_pay", True)),
            "can_read": bool(k.get("can_read", True)),
            "networks": networks,
        }
    return out


# ---- the agents registry (what the node reads from the chain) ------------------------------------------


def normalize_agents(raw):
    """`_config` `agents` ({agentIdentifier: {pricing, amounts, selling_vkey, selling_address}}) with
    defaults: pricing Fixed, amounts DEFAULT_PRICE, the default selling wallet. `selling_vkey: null` says
    the agent's NFT is in no selling wallet of this node."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("agents must be an object {agentIdentifier: {...}}")
    out = {}
    for agent_id, a in raw.items():
        a = a or {}
        pricing = a.get("pricing", "Fixed")
        if pricing not in PRICING_TYPES:
            raise ValueError(f"agents.{agent_id}.pricing must be one of {PRICING_TYPES}")
        amounts = a.get("amounts", DEFAULT_PRICE)
        if not isinstance(amounts, list) or not all(
            isinstance(f, dict) and isinstance(f.get("amount"), str) and isinstance(f.get("unit"), str) for f in amounts
        ):
            raise ValueError(f"agents.{agent_id}.amounts must be a list of {{amount, unit}} strings")
        out[agent_id] = {
            "pricing": pricing,
            "amounts": normalize_funds(amounts),
            "selling_vkey": a.get("selling_vkey", DEFAULT_SELLING_VKEY),
            "selling_address": a.get("selling_address", DEFAULT_SELLING_ADDRESS),
        }
    return out


def agent_entry(agents, agent_id):
    """The registry entry of `agent_id`: the default Fixed-priced agent when no registry is configured;
    Refusal 404 when one is and the agent is not in it."""
    if agents is None:
        return {
            "pricing": "Fixed",
            "amounts": [dict(f) for f in DEFAULT_PRICE],
            "selling_vkey": DEFAULT_SELLING_VKEY,
            "selling_address": DEFAULT_SELLING_ADDRESS,
        }
    entry = agents.get(agent_id)
    if entry is None:
        raise Refusal(404, "Agent identifier not found")
    return entry


def normalize_funds(funds):
    """Amounts as the node stores them: unit "lovelace" (any case) becomes ""."""
    return [{"amount": f["amount"], "unit": "" if f["unit"].lower() == "lovelace" else f["unit"]} for f in funds]


def funds_equal(a, b):
    """tx-sync's amount check: the same units with the same amounts, the same number of tokens."""

    def key(funds):
        return sorted((f["unit"], int(f["amount"])) for f in funds)

    return len(a) == len(b) and key(a) == key(b)


def _funds_schema(value, field):
    """[{amount: ≤ 25 digits, unit: ≤ 150 chars}], at most 7 (createPaymentsSchemaInput, P1's Amounts)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > 7:
        raise Refusal(400, f"{field}: Expected an array of at most 7 {{amount, unit}}")
    for f in value:
        if not isinstance(f, dict) or not isinstance(f.get("amount"), str) or not isinstance(f.get("unit"), str):
            raise Refusal(400, f"{field}: Expected {{amount: string, unit: string}}")
        if not DIGITS.fullmatch(f["amount"]) or len(f["amount"]) > 25 or len(f["unit"]) > 150:
            raise Refusal(400, f"{field}: amount must be at most 25 digits, unit at most 150 characters")
    return normalize_funds(value)


def _network_schema(body):
    if body.get("network") not in NETWORKS:
        raise Refusal(400, "network: Invalid enum value. Expected 'Preprod' | 'Mainnet'")


# ---- S1 POST /payment ----------------------------------------------------------------------------------


def payment_request(body, strict):
    """S1's schema, then its handler's checks up to the time rules (payments/index.ts): the request with
    times in ms (defaults filled in) and RequestedFunds normalized. The key and registry checks that sit
    between and after them are the caller's (they need `_config`). `strict`: the schema's lengths."""
    _network_schema(body)
    for field in ("agentIdentifier", "identifierFromPurchaser", "inputHash"):
        if not isinstance(body.get(field), str):
            raise Refusal(400, f"{field}: Required")
    if strict and not 57 <= len(body["agentIdentifier"]) <= 250:
        raise Refusal(400, "agentIdentifier: String must contain between 57 and 250 character(s)")
    if strict and not 14 <= len(body["identifierFromPurchaser"]) <= 26:
        raise Refusal(400, "identifierFromPurchaser: String must contain between 14 and 26 character(s)")
    if len(body["inputHash"]) > 250:
        raise Refusal(400, "inputHash: String must contain at most 250 character(s)")
    times = {}
    for field in ("payByTime", "submitResultTime"):
        v = body.get(field)
        times[field] = NODE_DEFAULT_TIME_MS if v is None else iso_ms(v, field)
    for field in ("unlockTime", "externalDisputeUnlockTime"):
        v = body.get(field)
        times[field] = None if v is None else iso_ms(v, field)
    return {
        "network": body["network"],
        "agentIdentifier": body["agentIdentifier"],
        "identifierFromPurchaser": body["identifierFromPurchaser"],
        "inputHash": body["inputHash"],
        "times": times,
        "RequestedFunds": _funds_schema(body.get("RequestedFunds"), "RequestedFunds"),
        "metadata": body.get("metadata") if isinstance(body.get("metadata"), str) else None,
    }


def payment_hex_and_times(req, now_ms):
    """S1's handler, after the network check: the two hex checks, the default unlock times, the five time
    rules. Returns (payByTime, submitResultTime, unlockTime, externalDisputeUnlockTime) in ms."""
    if not even_hex(req["identifierFromPurchaser"]):
        raise Refusal(400, "Purchaser identifier is not a valid hex string")
    if not even_hex(req["inputHash"]):
        raise Refusal(400, "Input hash is not a valid hex string")
    t = req["times"]
    pay_by, submit = t["payByTime"], t["submitResultTime"]
    unlock = t["unlockTime"] if t["unlockTime"] is not None else submit + 6 * HOUR_MS
    dispute = t["externalDisputeUnlockTime"] if t["externalDisputeUnlockTime"] is not None else submit + 12 * HOUR_MS
    broken = time_rule_broken(pay_by, submit, unlock, dispute, now_ms)
    if broken:
        raise Refusal(400, broken)
    return pay_by, submit, unlock, dispute


def payment_price(entry, requested):
    """S1's pricing checks against the agent's registry entry, in the node's order: what the buyer must
    lock (RequestedFunds). Then the selling wallet: 404 when the entry has none."""
    pricing = entry["pricing"]
    if pricing == "Fixed" and requested is not None:
        raise Refusal(400, "For fixed pricing, RequestedFunds must be null")
    if pricing == "Dynamic" and not requested:
        raise Refusal(400, "For dynamic pricing, RequestedFunds must be provided")
    if pricing not in ("Fixed", "Dynamic"):
        raise Refusal(400, "Pricing type not supported for payments")
    if pricing == "Dynamic" and any(int(f["amount"]) <= 0 for f in requested):
        raise Refusal(400, "RequestedFunds amounts must be positive")
    if entry["selling_vkey"] is None:
        raise Refusal(404, "Selling wallet not found")
    return [dict(f) for f in entry["amounts"]] if pricing == "Fixed" else requested


# ---- S2 / P2 resolve, S4 submit-result -------------------------------------------------------------------


def resolve_request(body):
    """S2's and P2's schema: blockchainIdentifier, network, and includeHistory as a *string*."""
    if not isinstance(body.get("blockchainIdentifier"), str):
        raise Refusal(400, "blockchainIdentifier: Required")
    _network_schema(body)
    history = body.get("includeHistory", "false")
    if not isinstance(history, str):
        js = {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}.get(type(history), "null")
        raise Refusal(400, f"includeHistory: Expected string, received {js}")
    return body["blockchainIdentifier"], history == "true"


def submit_request(body):
    """S4's schema: blockchainIdentifier, network, and a 64-hex submitResultHash."""
    if not isinstance(body.get("blockchainIdentifier"), str):
        raise Refusal(400, "blockchainIdentifier: Required")
    _network_schema(body)
    h = body.get("submitResultHash")
    if not isinstance(h, str) or HASH64.fullmatch(h) is None:
        raise Refusal(400, "submitResultHash must be a 64-char hex sha256 digest")
    return body["blockchainIdentifier"], h


# ---- P1 POST /purchase -----------------------------------------------------------------------------------


def purchase_request(body):
    """P1's schema (purchases/schemas.ts): names and types. Unknown keys are dropped, as zod does, so the seller's
    spelling `sellerVKey` leaves `sellerVkey` missing. Returns the normalized `Amounts` (or None)."""
    for key in (
        "blockchainIdentifier",
        "network",
        "sellerVkey",
        "agentIdentifier",
        "identifierFromPurchaser",
        "inputHash",
    ) + PURCHASE_TIMES:
        if not isinstance(body.get(key), str):
            return None, f"{key}: Required string"
    if body["network"] not in NETWORKS:
        return None, "network: Invalid enum value. Expected 'Preprod' | 'Mainnet'"
    if not (57 <= len(body["agentIdentifier"]) <= 250):
        return None, "agentIdentifier: String must contain between 57 and 250 character(s)"
    ifp = body["identifierFromPurchaser"]
    if not (14 <= len(ifp) <= 26) or not even_hex(ifp):
        return None, "identifierFromPurchaser: must be 14-26 hex characters of even length"
    if not HEX.fullmatch(body["inputHash"]):
        return None, "Input hash is not a valid hex string"
    for key in PURCHASE_TIMES:
        if not DIGITS.fullmatch(body[key]):
            return None, f"{key}: must be a number of milliseconds as a string"
    try:
        return _funds_schema(body.get("Amounts"), "Amounts"), None
    except Refusal as r:
        return None, r.message


def purchase_price(entry, amounts):
    """P1's pricing checks against the registry (purchases/shared.ts)."""
    if entry["pricing"] not in ("Fixed", "Dynamic"):
        raise Refusal(400, "Agent identifier pricing type not supported")
    if entry["pricing"] == "Dynamic" and not amounts:
        raise Refusal(400, "For dynamic pricing, Amounts must be provided")
    if amounts and any(int(f["amount"]) <= 0 for f in amounts):
        raise Refusal(400, "Amounts must be positive")


def signed_fields_mismatch(body, amounts, payment):
    """What the real node checks with the seller's signature: the request repeats the seller's values
    exactly (and, for Dynamic pricing, its RequestedFunds as `amounts`). The stand-in's identifiers are
    `mock_…`, so it compares the fields instead."""
    if payment is None:
        return "Invalid blockchain identifier, format invalid"
    if body["identifierFromPurchaser"] != payment["_identifierFromPurchaser"]:
        return "Invalid blockchain identifier, purchaser id mismatch"
    if body["agentIdentifier"] != payment["agentIdentifier"]:
        return "Invalid blockchain identifier, agent identifier mismatch"
    if body["inputHash"] != payment.get("inputHash") or any(body[k] != payment[k] for k in PURCHASE_TIMES):
        return "Invalid blockchain identifier, signature invalid"
    if payment["pricingType"] == "Dynamic" and not funds_equal(amounts or [], payment["RequestedFunds"]):
        return "Invalid blockchain identifier, signature invalid"
    return None
