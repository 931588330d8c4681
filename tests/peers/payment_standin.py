#!/usr/bin/env python3
"""Offline stand-in for the Masumi payment service (https://github.com/masumi-network/masumi-payment-service).

One process plays a seller's node and a purchaser's node sharing one escrow: a payment (seller side) and
the purchase of it (purchaser side) have the same blockchainIdentifier and move together, as the real
nodes do by watching the same contract (payment_standin_escrow.py: the "tick"). The requests are judged
by the node's rules, in its order and words (payment_standin_rules.py), as read from the node's source
(https://github.com/masumi-network/masumi-payment-service: src/routes/api/payments/ and purchases/); what
interlingua's seller side needs of it is docs/masumi-seller-design.md, "Tests".

Base path /api/v1 (so PAYMENT_SERVICE_URL=http://127.0.0.1:<port>/api/v1); every route also takes a
trailing slash; answers use the node's envelope {"status":"success","data":…} / {"status":"error",
"error":{"message":…}}.

Seller side
  S1  POST /api/v1/payment
      Body: network, agentIdentifier, identifierFromPurchaser, inputHash, payByTime, submitResultTime,
      optional unlockTime, externalDisputeUnlockTime (all four ISO 8601 strings only), RequestedFunds,
      metadata. Checks, in the node's order: the key (canPay); the schema (lengths when `strict`; a time
      that is not an ISO string; inputHash required); 401 "Unauthorized, network not allowed";
      400 "Purchaser identifier is not a valid hex string", "Input hash is not a valid hex string"
      (even-length hex, not empty); the five time rules (a missing payByTime / submitResultTime is the
      node's default, 1970-01-01T12:00:00Z, and fails them; unlockTime defaults to submitResultTime + 6 h,
      externalDisputeUnlockTime to submitResultTime + 12 h):
        400 "Pay by time must be before submit result time (min. 5 minutes)"
        400 "Pay by time must be in the future (max. 5 minutes)"
        400 "External dispute unlock time must be after unlock time (min. 15 minutes difference)"
        400 "Submit result time must be in the future (min. 15 minutes)"
        400 "Submit result time must be before unlock time with at least 15 minutes difference"
      then the registry (`agents`): 404 "Agent identifier not found"; 400 "For fixed pricing,
      RequestedFunds must be null", "For dynamic pricing, RequestedFunds must be provided", "Pricing type
      not supported for payments" (Free), "RequestedFunds amounts must be positive"; 404 "Selling wallet
      not found" (an agent whose selling_vkey is null).
      Answer: the Payment: onChainState null, NextAction {requestedAction "WaitingForExternalAction",
      errorType null, errorNote null, resultHash null}, resultHash "", the four times as decimal-ms
      strings, RequestedFunds (the Fixed price, or the request's for Dynamic), SmartContractWallet
      {id, walletVkey, walletAddress} (the selling wallet: its walletVkey is start_job's sellerVKey),
      BuyerWallet null, CurrentTransaction null, requestedById, PaymentSource, WithdrawnForSeller [],
      WithdrawnForBuyer []. blockchainIdentifier is "mock_<hex>".
  S2  POST /api/v1/payment/resolve-blockchain-identifier  {blockchainIdentifier, network, includeHistory}
      Key canRead. includeHistory must be a string (400 otherwise); 404 "Payment not found". Runs a tick
      (below), then answers the Payment (TransactionHistory/ActionHistory null unless "true").
  S4  POST /api/v1/payment/submit-result  {network, blockchainIdentifier, submitResultHash}
      Key canPay. 400 "submitResultHash must be a 64-char hex sha256 digest"; 404 "Payment not found or
      in invalid state" unless onChainState is FundsLocked, RefundRequested or Disputed with NextAction
      WaitingForExternalAction and a CurrentTransaction; 403 "You are not authorized to submit results
      for this payment" for a key other than the one that made the payment (only with `keys`).
      Effect: NextAction {requestedAction "SubmitResultRequested", resultHash}; the next tick makes it
      ResultSubmitted (or Disputed, from RefundRequested / Disputed) with the top-level resultHash, but
      only while submitResultTime is more than 5 min away: after that it stays SubmitResultRequested.
      GET /api/v1/health -> {"status":"success","data":{"status":"ok"}}

Purchaser side
  P1  POST /api/v1/purchase  (times as decimal-ms strings, sellerVkey with a small k; see docs/payments.md)
      Key canPay. Schema errors name the field. Repeated: 409 "Purchase exists" with id and object.
      With `agents`: 404 "Agent identifier not found", 400 "Agent identifier pricing type not supported",
      "For dynamic pricing, Amounts must be provided", "Amounts must be positive". The fields the seller
      signed must repeat the payment's ("Invalid blockchain identifier, format invalid | purchaser id
      mismatch | agent identifier mismatch | signature invalid": for Dynamic pricing, Amounts must repeat
      RequestedFunds; for Fixed, other Amounts are locked as asked). With `agents`, sellerVkey must equal
      the payment's selling vkey: 400 "Invalid seller vkey". Answer: onChainState null, NextAction
      "FundsLockingRequested", PaidFunds: `paid_amount` if set, else the request's Amounts, else the
      payment's RequestedFunds.
  P2  POST /api/v1/purchase/resolve-blockchain-identifier  Key canRead. Runs a tick, answers the Purchase.
  P4  POST /api/v1/purchase/request-refund  {blockchainIdentifier, network}  Key canPay. 404 "Purchase not
      found or not in valid state" unless FundsLocked/ResultSubmitted, WaitingForExternalAction, with a
      transaction. The purchase's NextAction becomes SetRefundRequestedRequested and the seller's payment
      RefundRequested (Disputed if a result was on chain): one escrow.

The tick (the node's clock), on every S2 and P2 of an identifier:
  the purchase's lock lands (purchase_mode "lock", `lock_after_ms` after P1, only by payByTime): the
  purchase FundsLocked; the payment FundsLocked with BuyerWallet {id, walletVkey: buyer_vkey} and
  CurrentTransaction {txHash, …} if the locked amounts equal its RequestedFunds, else FundsOrDatumInvalid,
  WaitingForManualAction, errorNote "Payment amounts do not match. This likely is a spoofing attempt.";
  no lock by payByTime + lock_grace_ms: the purchase FundsOrDatumInvalid, WaitingForManualAction, "Purchase
  request payByTime (<ms>) passed without on-chain lock; no FundsLocked tx observed within <n>s grace.";
  on the S2 poll numbered `lock_on_poll` an instant buyer elsewhere locks the payment (by payByTime);
  no lock by payByTime + payment_grace_ms: the payment FundsOrDatumInvalid, WaitingForManualAction,
  "Payment request payByTime (<ms>) passed without on-chain lock; no FundsLocked tx observed within <n>s
  grace."; a queued S4 lands (above), and the purchase sees the same state and resultHash.

Keys. Without `keys`, STANDIN_API_KEY / `api_key` (seller side) and STANDIN_PURCHASER_API_KEY /
`purchaser_api_key` (purchaser side), when set, must be the `token` header (else 401); any network goes.
With `keys` ({token: {"can_pay": bool, "can_read": bool, "networks": ["Preprod", "Mainnet"]}}, each
defaulting to true, true, both) they replace both: 401 "Unauthorized, no authentication token provided",
"Unauthorized, invalid authentication token provided", "Unauthorized, payment access required" / "read
access required", "Unauthorized, network not allowed".

Registry. Without `agents`, any agentIdentifier is sold at a Fixed price of 5000000 lovelace (unit "") from
the default selling wallet (vkey 5e11e5…5e11e), and P1's sellerVkey is not checked (masumi 1.2.0 agents
answer start_job with their own SELLER_VKEY). With `agents` ({agentIdentifier: {"pricing": "Fixed" |
"Dynamic" | "Free", "amounts": [{"amount", "unit"}], "selling_vkey": str|null, "selling_address": str}},
defaulting to Fixed, 5000000 lovelace, the default wallet), only those agents are sold.

Test helpers (not part of the real node)
  GET  /_log        -> {"requests":[{"seq","t","method","path","token","body"}, …]}  every request received
  GET  /_payments   -> {"payments":{<blockchainIdentifier>: <Payment + "_polls" (S2 calls) + "_submits"
                       (S4 calls)>}, "counts":{"payment_create", "resolve", "submit_result"}} (calls received)
  GET  /_purchases  -> {"purchases":{<blockchainIdentifier>: <Purchase + "_polls">}}
  POST /_config     -> set any of the keys below; answers them all. 400 on a malformed agents / keys.
  POST /_lock       {blockchainIdentifier}: lock the payment now (FundsLocked, BuyerWallet,
                       CurrentTransaction), whatever the time
  POST /_withdraw   {blockchainIdentifier}: (after a tick) ResultSubmitted -> Withdrawn, NextAction None,
                       WithdrawnForSeller = RequestedFunds (the purchase too); 409 from another state
  POST /_refund     {blockchainIdentifier}: FundsLocked | RefundRequested | Disputed -> RefundWithdrawn,
                       NextAction None, WithdrawnForBuyer = RequestedFunds (the purchase too)
  POST /_dispute_split {blockchainIdentifier, seller_amount}: Disputed -> DisputedWithdrawn,
                       WithdrawnForSeller [{amount: seller_amount, unit}], WithdrawnForBuyer the rest
  POST /_reset      -> clear log, payments, purchases and counts (the config stays)

`_config` keys (default):
  lock_on_poll (1 or STANDIN_LOCK_ON_POLL)  the S2 poll on which an instant buyer locks a payment; 0: only
                        a purchase (or /_lock) locks it
  strict (true or STANDIN_STRICT)  S1's schema lengths: agentIdentifier 57-250, identifierFromPurchaser 14-26
  api_key, purchaser_api_key (null or env)  the single keys of each side, when `keys` is null
  keys (null), agents (null)  see above
  buyer_vkey ("b0b0…b0")  the purchaser's wallet vkey a lock puts in BuyerWallet
  fail_create (false)   every S1 answers 500
  fail_payment_create (0)  that many S1 calls answer 500 without creating a payment
  refuse_payment_create (null)  a message: S1 answers 400 with it
  pay_by_ms, submit_result_ms (null)  after S1's checks, the payment's payByTime / submitResultTime become
                        now + that many ms (unlockTime and externalDisputeUnlockTime follow submitResultTime
                        unless the request gave them): short deadlines for tests
  payment_grace_ms (300000)  a payment unlocked this long after payByTime expires (the node's 300 s)
  purchase_mode ("lock")  lock: the purchase's lock lands on the first tick; never: never (FundsOrDatumInvalid
                        after payByTime + lock_grace_ms); refuse: P1 answers 400 with refuse_message
  refuse_message ("Not enough funds in wallets")
  lock_after_ms (0)     the purchase's lock lands on the first tick at least this long after P1
  lock_grace_ms (300000)  a purchase unlocked this long after payByTime expires
  paid_amount (null)    a string: the purchase locks [{amount: paid_amount, unit: ""}] whatever it should
                        (a wrong amount makes the payment FundsOrDatumInvalid)
  refund_conflicts (0)  that many P4 calls answer 409 first
  lost_purchase_answers (0)  that many P1 calls make the purchase but answer 500
  submit_failures (0)   that many S4 calls answer 500 first, nothing applied
  submit_refusals (0)   then that many answer 400, nothing applied
  submit_hold_ms (0)    S4 is applied, then its answer held this long (to kill the caller meanwhile)

Binds 127.0.0.1:0 (or --port / STANDIN_PORT), prints exactly one line "PORT=<n>" on stdout, then stdout is
closed (redirected to stderr). Logs go to stderr. Exits on SIGTERM/SIGINT, when stdin reaches EOF (only if stdin
is a pipe or socket), and when the parent process dies.

Environment (all optional): STANDIN_LOCK_ON_POLL, STANDIN_STRICT (1/0), STANDIN_API_KEY,
STANDIN_PURCHASER_API_KEY (see `_config`); STANDIN_WATCH_STDIN auto (default: watch only a pipe/socket) | 1 | 0;
PEER_WATCH_PARENT 1 (default): exit when the parent process dies; PEER_LOG_LEVEL uvicorn's, default "warning".
"""

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import threading
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import payment_standin_escrow as escrow
import payment_standin_rules as rules
import peer_lifecycle
from payment_standin_rules import Refusal

BASE = "/api/v1"


def _env_bool(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


CONFIG = {
    "lock_on_poll": int(os.environ.get("STANDIN_LOCK_ON_POLL", "1")),
    "strict": _env_bool("STANDIN_STRICT", True),
    "api_key": os.environ.get("STANDIN_API_KEY") or None,
    "purchaser_api_key": os.environ.get("STANDIN_PURCHASER_API_KEY") or None,
    "keys": None,
    "agents": None,
    "buyer_vkey": rules.DEFAULT_BUYER_VKEY,
    "fail_create": False,
    "fail_payment_create": 0,
    "refuse_payment_create": None,
    "pay_by_ms": None,
    "submit_result_ms": None,
    "payment_grace_ms": 5 * 60 * 1000,
    "purchase_mode": "lock",
    "refuse_message": "Not enough funds in wallets",
    "lock_after_ms": 0,
    "lock_grace_ms": 5 * 60 * 1000,
    "paid_amount": None,
    "refund_conflicts": 0,
    "lost_purchase_answers": 0,
    "submit_failures": 0,
    "submit_refusals": 0,
    "submit_hold_ms": 0,
}
STATE = {
    "payments": {},  # blockchainIdentifier -> Payment (keys starting "_" are the stand-in's own)
    "purchases": {},  # blockchainIdentifier -> Purchase
    "counts": {"payment_create": 0, "resolve": 0, "submit_result": 0},
    "log": [],
    "seq": 0,
}
LOCK = threading.Lock()

app = FastAPI(title="masumi payment-service stand-in", docs_url=None, redoc_url=None, openapi_url=None)


def ok(data):
    return JSONResponse(status_code=200, content={"status": "success", "data": data})


def err(code, message):
    return JSONResponse(status_code=code, content={"status": "error", "error": {"message": message}})


def now_ms():
    return int(time.time() * 1000)


def route(method, path):
    """Registers a handler at `path` and at `path` with a trailing slash (Express routing is non-strict)."""

    def register(handler):
        for p in (BASE + path, BASE + path + "/"):
            app.add_api_route(p, handler, methods=[method])
        return handler

    return register


async def _read_json(request: Request, count=None):
    """The body as JSON (None if empty), and a parse error if it was not JSON. Every request is logged;
    `count` names the counter of `/_payments` this call adds one to."""
    raw = await request.body()
    body, parse_error = None, None
    if raw:
        try:
            body = json.loads(raw)
        except Exception as e:  # keep the raw text in the log
            parse_error = str(e)
            body = raw.decode("utf-8", "replace")
    with LOCK:
        if count is not None:
            STATE["counts"][count] += 1
        STATE["seq"] += 1
        STATE["log"].append(
            {
                "seq": STATE["seq"],
                "t": time.time(),
                "method": request.method,
                "path": request.url.path,
                "token": request.headers.get("token"),
                "body": body,
            }
        )
    return body, parse_error


def _key(request: Request, side, need):
    """The caller's key record (None without `keys`), or Refusal 401. `side`: "seller" | "purchaser"."""
    token = request.headers.get("token")
    if CONFIG["keys"] is not None:
        return rules.key_for(CONFIG["keys"], token, need)
    single = CONFIG["api_key"] if side == "seller" else CONFIG["purchaser_api_key"]
    if single is not None and token != single:
        raise Refusal(401, "Unauthorized" if side == "seller" else "Unauthorized, no authentication token provided")
    return None


def _key_id(token):
    return "key_" + hashlib.sha256((token or "").encode()).hexdigest()[:20]


def _public(obj, history=None):
    """The node's view of a stored object: without the stand-in's "_" keys; with history keys when asked."""
    out = {k: v for k, v in obj.items() if not k.startswith("_")}
    if history is not None:
        out["TransactionHistory"] = [] if history else None
        out["ActionHistory"] = [] if history else None
    return out


def _json_object(body, perr):
    if perr is not None or not isinstance(body, dict):
        raise Refusal(400, "Invalid JSON body")
    return body


def _refused(handler):
    """Turns a Refusal raised by `handler` into the node's error answer."""

    async def wrapped(request: Request):
        try:
            return await handler(request)
        except Refusal as r:
            return err(r.status, r.message)

    wrapped.__name__ = handler.__name__
    return wrapped


# ---- seller side ---------------------------------------------------------------------------------------


@route("POST", "/payment")
@_refused
async def create_payment(request: Request):
    body, perr = await _read_json(request, count="payment_create")
    key = _key(request, "seller", "pay")
    with LOCK:
        if CONFIG["fail_create"]:
            return err(500, "Internal Server Error (stand-in fail_create)")
        if CONFIG["fail_payment_create"] > 0:
            CONFIG["fail_payment_create"] -= 1
            return err(500, "Internal Server Error (stand-in fail_payment_create)")
        if CONFIG["refuse_payment_create"] is not None:
            return err(400, CONFIG["refuse_payment_create"])
    req = rules.payment_request(_json_object(body, perr), CONFIG["strict"])
    rules.check_network(key, req["network"])
    now = now_ms()
    pay_by, submit, unlock, dispute = rules.payment_hex_and_times(req, now)
    entry = rules.agent_entry(CONFIG["agents"], req["agentIdentifier"])
    requested = rules.payment_price(entry, req["RequestedFunds"])
    if CONFIG["pay_by_ms"] is not None:
        pay_by = now + int(CONFIG["pay_by_ms"])
    if CONFIG["submit_result_ms"] is not None:
        submit = now + int(CONFIG["submit_result_ms"])
        if req["times"]["unlockTime"] is None:
            unlock = submit + 6 * rules.HOUR_MS
        if req["times"]["externalDisputeUnlockTime"] is None:
            dispute = submit + 12 * rules.HOUR_MS
    token = request.headers.get("token")
    created = escrow.now_iso()
    bid = "mock_" + secrets.token_hex(16)
    payment = {
        "id": "cl" + secrets.token_hex(11),
        "createdAt": created,
        "updatedAt": created,
        "lastCheckedAt": None,
        "blockchainIdentifier": bid,
        "agentIdentifier": req["agentIdentifier"],
        "agentName": None,
        "pricingType": entry["pricing"],
        "payByTime": str(pay_by),
        "submitResultTime": str(submit),
        "unlockTime": str(unlock),
        "externalDisputeUnlockTime": str(dispute),
        "inputHash": req["inputHash"],
        "resultHash": "",
        "onChainState": None,
        "NextAction": escrow.payment_action("WaitingForExternalAction"),
        "RequestedFunds": requested,
        "WithdrawnForSeller": [],
        "WithdrawnForBuyer": [],
        "totalBuyerCardanoFees": 0,
        "totalSellerCardanoFees": 0,
        "collateralReturnLovelace": None,
        "cooldownTime": 0,
        "cooldownTimeOtherParty": 0,
        "PaymentSource": {
            "id": "cl" + secrets.token_hex(11),
            "network": req["network"],
            "paymentSourceType": "Web3CardanoV1",
            "smartContractAddress": "addr_test1wstandinescrow",
            "policyId": req["agentIdentifier"][:56],
        },
        "BuyerWallet": None,
        "SmartContractWallet": {
            "id": "cl" + hashlib.sha256(entry["selling_vkey"].encode()).hexdigest()[:22],
            "walletVkey": entry["selling_vkey"],
            "walletAddress": entry["selling_address"],
        },
        "CurrentTransaction": None,
        "requestedById": _key_id(token),
        "metadata": req["metadata"],
        "sellerReturnAddress": entry["selling_address"],
        "_identifierFromPurchaser": req["identifierFromPurchaser"],
        "_token": token,
        "_registered": CONFIG["agents"] is not None,
        "_polls": 0,
        "_submits": 0,
    }
    with LOCK:
        STATE["payments"][bid] = payment
    return ok(_public(payment))


@route("POST", "/payment/resolve-blockchain-identifier")
@_refused
async def resolve_payment(request: Request):
    body, perr = await _read_json(request, count="resolve")
    key = _key(request, "seller", "read")
    body = _json_object(body, perr)
    bid, history = rules.resolve_request(body)
    rules.check_network(key, body["network"])
    with LOCK:
        p = STATE["payments"].get(bid)
        if p is None:
            return err(404, "Payment not found")
        p["_polls"] += 1
        lop = int(CONFIG["lock_on_poll"])
        escrow.tick(p, STATE["purchases"].get(bid), CONFIG, now_ms(), poll_lock=lop > 0 and p["_polls"] >= lop)
        return ok(_public(p, history))


@route("POST", "/payment/submit-result")
@_refused
async def submit_result(request: Request):
    body, perr = await _read_json(request, count="submit_result")
    with LOCK:
        known = STATE["payments"].get(body.get("blockchainIdentifier")) if isinstance(body, dict) else None
        if known is not None:
            known["_submits"] += 1
    key = _key(request, "seller", "pay")
    with LOCK:
        if CONFIG["submit_failures"] > 0:
            CONFIG["submit_failures"] -= 1
            return err(500, "Internal Server Error (stand-in submit_failures)")
        if CONFIG["submit_refusals"] > 0:
            CONFIG["submit_refusals"] -= 1
            return err(400, "Submit result refused (stand-in submit_refusals)")
    body = _json_object(body, perr)
    bid, result_hash = rules.submit_request(body)
    rules.check_network(key, body["network"])
    with LOCK:
        p = STATE["payments"].get(bid)
        if (
            p is None
            or p["onChainState"] not in ("FundsLocked", "RefundRequested", "Disputed")
            or p["NextAction"]["requestedAction"] != "WaitingForExternalAction"
            or p["CurrentTransaction"] is None
        ):
            return err(404, "Payment not found or in invalid state")
        if CONFIG["keys"] is not None and request.headers.get("token") != p["_token"]:
            return err(403, "You are not authorized to submit results for this payment")
        p["NextAction"] = escrow.payment_action("SubmitResultRequested", result_hash=result_hash)
        p["updatedAt"] = escrow.now_iso()
        answer = _public(p)
        hold = int(CONFIG["submit_hold_ms"])
    if hold > 0:
        await asyncio.sleep(hold / 1000)
    return ok(answer)


@route("GET", "/health")
async def health(request: Request):
    return ok({"status": "ok"})


# ---- purchaser side ------------------------------------------------------------------------------------


@route("POST", "/purchase")
@_refused
async def create_purchase(request: Request):
    body, perr = await _read_json(request)
    key = _key(request, "purchaser", "pay")
    body = _json_object(body, perr)
    amounts, problem = rules.purchase_request(body)
    if problem:
        return err(400, problem)
    rules.check_network(key, body["network"])
    bid = body["blockchainIdentifier"]
    with LOCK:
        existing = STATE["purchases"].get(bid)
        if existing is not None:
            return JSONResponse(
                status_code=409,
                content={
                    "status": "error",
                    "error": {"message": "Purchase exists"},
                    "id": existing["id"],
                    "object": _public(existing),
                },
            )
        if CONFIG["purchase_mode"] == "refuse":
            return err(400, CONFIG["refuse_message"])
        if CONFIG["agents"] is not None:
            rules.purchase_price(rules.agent_entry(CONFIG["agents"], body["agentIdentifier"]), amounts)
        payment = STATE["payments"].get(bid)
        problem = rules.signed_fields_mismatch(body, amounts, payment)
        if problem:
            return err(400, problem)
        if payment["_registered"] and body["sellerVkey"] != payment["SmartContractWallet"]["walletVkey"]:
            return err(400, "Invalid seller vkey")
        if CONFIG["paid_amount"] is not None:
            paid = [{"amount": str(CONFIG["paid_amount"]), "unit": ""}]
        else:
            paid = amounts or [dict(f) for f in payment["RequestedFunds"]]
        token = request.headers.get("token")
        now = escrow.now_iso()
        purchase = {
            "id": "cl" + secrets.token_hex(11),
            "createdAt": now,
            "updatedAt": now,
            "blockchainIdentifier": bid,
            "agentIdentifier": body["agentIdentifier"],
            "pricingType": payment["pricingType"],
            "payByTime": body["payByTime"],
            "submitResultTime": body["submitResultTime"],
            "unlockTime": body["unlockTime"],
            "externalDisputeUnlockTime": body["externalDisputeUnlockTime"],
            "onChainState": None,
            "NextAction": escrow.purchase_action("FundsLockingRequested"),
            "inputHash": body["inputHash"],
            "resultHash": None,
            "PaidFunds": paid,
            "WithdrawnForSeller": [],
            "WithdrawnForBuyer": [],
            "SellerWallet": {"id": "cl" + secrets.token_hex(11), "walletVkey": body["sellerVkey"]},
            "CurrentTransaction": None,
            "requestedById": _key_id(token),
            "_mode": CONFIG["purchase_mode"],
            "_created_ms": now_ms(),
            "_polls": 0,
        }
        STATE["purchases"][bid] = purchase
        if CONFIG["lost_purchase_answers"] > 0:
            CONFIG["lost_purchase_answers"] -= 1
            return err(500, "Internal Server Error")
        return ok(_public(purchase))


@route("POST", "/purchase/resolve-blockchain-identifier")
@_refused
async def resolve_purchase(request: Request):
    body, perr = await _read_json(request)
    key = _key(request, "purchaser", "read")
    body = _json_object(body, perr)
    bid, history = rules.resolve_request(body)
    rules.check_network(key, body["network"])
    with LOCK:
        purchase = STATE["purchases"].get(bid)
        if purchase is None:
            return err(404, "Purchase not found")
        purchase["_polls"] += 1
        escrow.tick(STATE["payments"].get(bid), purchase, CONFIG, now_ms())
        return ok(_public(purchase, history))


@route("POST", "/purchase/request-refund")
@_refused
async def request_refund(request: Request):
    body, perr = await _read_json(request)
    key = _key(request, "purchaser", "pay")
    body = _json_object(body, perr)
    if body.get("network") is not None:
        rules.check_network(key, body["network"])
    bid = body.get("blockchainIdentifier")
    with LOCK:
        purchase = STATE["purchases"].get(bid)
        if CONFIG["refund_conflicts"] > 0:
            CONFIG["refund_conflicts"] -= 1
            return err(409, "Purchase state changed concurrently; retry against the new state")
        if (
            purchase is None
            or purchase["onChainState"] not in ("FundsLocked", "ResultSubmitted")
            or purchase["NextAction"]["requestedAction"] != "WaitingForExternalAction"
            or purchase["CurrentTransaction"] is None
        ):
            return err(404, "Purchase not found or not in valid state")
        purchase["NextAction"] = escrow.purchase_action("SetRefundRequestedRequested")
        escrow.refund_requested(STATE["payments"].get(bid))
        return ok(_public(purchase))


# ---- test helpers --------------------------------------------------------------------------------------


@app.get("/_log")
async def get_log():
    with LOCK:
        return {"requests": list(STATE["log"])}


@app.get("/_payments")
async def get_payments():
    with LOCK:
        return {
            "payments": {
                k: dict(_public(v), _polls=v["_polls"], _submits=v["_submits"]) for k, v in STATE["payments"].items()
            },
            "counts": dict(STATE["counts"]),
        }


@app.get("/_purchases")
async def get_purchases():
    with LOCK:
        return {"purchases": {k: dict(_public(v), _polls=v["_polls"]) for k, v in STATE["purchases"].items()}}


@app.post("/_config")
async def set_config(request: Request):
    body = await request.json()
    try:
        agents = rules.normalize_agents(body["agents"]) if "agents" in body else CONFIG["agents"]
        keys = rules.normalize_keys(body["keys"]) if "keys" in body else CONFIG["keys"]
    except ValueError as e:
        return JSONResponse(status_code=400, content={"error": str(e)})
    unknown = sorted(set(body) - set(CONFIG))
    if unknown:
        return JSONResponse(status_code=400, content={"error": f"unknown _config keys: {unknown}"})
    with LOCK:
        CONFIG.update(body)
        CONFIG["agents"], CONFIG["keys"] = agents, keys
        return dict(CONFIG)


async def _by_hand(request: Request, act):
    """A helper's frame: `act(payment, purchase, body)` on the payment the body's blockchainIdentifier
    names (404 if none), under the lock; it returns None, or why it cannot (409)."""
    body = await request.json()
    with LOCK:
        p = STATE["payments"].get(body.get("blockchainIdentifier"))
        if p is None:
            return err(404, "Payment not found")
        problem = act(p, STATE["purchases"].get(p["blockchainIdentifier"]), body)
        return err(409, problem) if problem else ok(_public(p))


def _settle(how):
    def act(payment, purchase, body):
        escrow.tick(payment, purchase, CONFIG, now_ms())
        return escrow.settle(payment, purchase, how, body.get("seller_amount"))

    return act


def _lock_now(payment, purchase, body):
    if payment["onChainState"] is None:
        escrow.lock_payment(payment, payment["RequestedFunds"], CONFIG["buyer_vkey"])


@app.post("/_lock")
async def force_lock(request: Request):
    return await _by_hand(request, _lock_now)


@app.post("/_withdraw")
async def withdraw(request: Request):
    return await _by_hand(request, _settle("withdraw"))


@app.post("/_refund")
async def refund(request: Request):
    return await _by_hand(request, _settle("refund"))


@app.post("/_dispute_split")
async def dispute_split(request: Request):
    return await _by_hand(request, _settle("split"))


@app.post("/_reset")
async def reset():
    with LOCK:
        STATE["payments"].clear()
        STATE["purchases"].clear()
        STATE["log"].clear()
        STATE["counts"] = {k: 0 for k in STATE["counts"]}
    return {"ok": True}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=int(os.environ.get("STANDIN_PORT", "0")))
    args = ap.parse_args()
    peer_lifecycle.run(
        peer_lifecycle.bind(args.port),
        app,
        announce="PORT={port}",
        log_level=os.environ.get("PEER_LOG_LEVEL", "warning").lower(),
        watch_stdin_env="STANDIN_WATCH_STDIN",
    )


if __name__ == "__main__":
    main()
