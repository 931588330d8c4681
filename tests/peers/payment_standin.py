#!/usr/bin/env python3
"""Offline stand-in for the Masumi payment service (https://github.com/masumi-network/masumi-payment-service).

Serves, under the base path /api/v1 (so PAYMENT_SERVICE_URL=http://127.0.0.1:<port>/api/v1):
  P1  POST /api/v1/payment/                                 (also without the trailing slash)
  P2  POST /api/v1/payment/resolve-blockchain-identifier    (also with a trailing slash)
  P3  POST /api/v1/payment/submit-result                    (also with a trailing slash)
      GET  /api/v1/health                                   -> {"status":"success","data":{"status":"ok"}}
Purchaser side (the service's src/routes/api/purchases: purchase, resolve, refund), sharing state with the seller side: a seller payment reports
onChainState "FundsLocked" once a purchase of its blockchainIdentifier has locked funds.
  P1  POST /api/v1/purchase                                  (also with a trailing slash) -> Purchase; repeated -> 409
  P2  POST /api/v1/purchase/resolve-blockchain-identifier    -> Purchase (the lock happens on its first poll by default)
  P4  POST /api/v1/purchase/request-refund                   -> Purchase with NextAction SetRefundRequestedRequested
Test helpers (not part of the real node):
      GET  /_log       -> {"requests":[{"seq","t","method","path","token","body"}, ...]}  every request received
      GET  /_payments  -> {"payments":{<blockchainIdentifier>: <payment object + "_polls">}}
      GET  /_purchases -> {"purchases":{<blockchainIdentifier>: <purchase object + "_polls">}}
      POST /_config    -> body: any of {"lock_on_poll":int, "strict":bool, "fail_create":bool, "api_key":str|null,
                          "purchaser_api_key":str|null, "purchase_mode":"lock"|"never"|"refuse",
                          "refuse_message":str, "pay_by_ms":int|null, "submit_result_ms":int|null,
                          "lock_grace_ms":int, "refund_conflicts":int, "lost_purchase_answers":int,
                          "paid_amount":str}
                          purchase_mode: lock = funds locked on the purchase's first P2 poll; never = never locked
                          (FundsOrDatumInvalid once payByTime + lock_grace_ms has passed); refuse = P1 answers 400
                          with refuse_message. pay_by_ms / submit_result_ms: the seller's payByTime / submitResultTime
                          become now + that many ms (short deadlines for tests). refund_conflicts: that many P4 calls
                          answer 409 first. lost_purchase_answers: that many P1 calls make the purchase but answer
                          500 (an answer lost on the way: the purchaser's retry then meets 409).
      POST /_lock      -> body {"blockchainIdentifier":"..."}: set onChainState "FundsLocked" now
      POST /_reset     -> clear log and payments

Binds 127.0.0.1:0 (or --port / STANDIN_PORT), prints exactly one line "PORT=<n>" on stdout, then stdout is
closed (redirected to stderr). Logs go to stderr. Exits on SIGTERM/SIGINT, when stdin reaches EOF (only if stdin
is a pipe or socket), and when the parent process dies.

Environment (all optional):
  STANDIN_LOCK_ON_POLL  int, default 1: resolve poll number on which onChainState turns null -> "FundsLocked".
                        1 = on the first poll (instant buyer). 0 = never (job stays awaiting_payment; use /_lock).
  STANDIN_STRICT        1 (default) or 0: validate P1 like the real node: identifierFromPurchaser 14-26 chars,
                        even length, hex; agentIdentifier 57-250 chars. Failure -> 400 error envelope.
  STANDIN_API_KEY       if set, every seller-side /api/v1 request must carry header `token: <value>`, else 401.
  STANDIN_PURCHASER_API_KEY  if set, every purchaser-side request (/api/v1/purchase...) must carry it as `token`.
  STANDIN_WATCH_STDIN   auto (default: watch only a pipe/socket), 1 (always), 0 (never).
  PEER_WATCH_PARENT     1 (default): exit when the parent process dies (checked every 0.5 s); 0 disables.
  PEER_LOG_LEVEL        uvicorn log level, default "warning".
"""

import argparse
import json
import os
import re
import secrets
import threading
import time
from datetime import datetime, timezone

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import peer_lifecycle

BASE = "/api/v1"
HOUR_MS = 3600 * 1000


def _env_bool(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.strip().lower() in ("1", "true", "yes", "on")


STATE = {
    "lock_on_poll": int(os.environ.get("STANDIN_LOCK_ON_POLL", "1")),
    "strict": _env_bool("STANDIN_STRICT", True),
    "fail_create": False,
    "api_key": os.environ.get("STANDIN_API_KEY") or None,
    "purchaser_api_key": os.environ.get("STANDIN_PURCHASER_API_KEY") or None,
    "purchase_mode": "lock",
    "refuse_message": "Not enough funds in wallets",
    "pay_by_ms": None,
    "submit_result_ms": None,
    "lock_grace_ms": 5 * 60 * 1000,
    "refund_conflicts": 0,
    "lost_purchase_answers": 0,
    "paid_amount": "5000000",
    "payments": {},  # blockchainIdentifier -> payment dict
    "purchases": {},  # blockchainIdentifier -> purchase dict
    "purchase_polls": {},
    "polls": {},  # blockchainIdentifier -> number of resolve polls
    "log": [],
    "seq": 0,
}
LOCK = threading.Lock()

app = FastAPI(title="masumi payment-service stand-in", docs_url=None, redoc_url=None, openapi_url=None)


def ok(data):
    return JSONResponse(status_code=200, content={"status": "success", "data": data})


def err(code, message):
    return JSONResponse(status_code=code, content={"status": "error", "error": {"message": message}})


async def _read_json(request: Request):
    raw = await request.body()
    body = None
    parse_error = None
    if raw:
        try:
            body = json.loads(raw)
        except Exception as e:  # keep the raw text in the log
            parse_error = str(e)
            body = raw.decode("utf-8", "replace")
    with LOCK:
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


def _auth(request: Request):
    key = STATE["api_key"]
    if key is not None and request.headers.get("token") != key:
        return err(401, "Unauthorized")
    return None


def _iso_to_ms(value):
    """'2026-11-23T01:45:44.446Z' -> 1795398344446 (int). Accepts ms ints / numeric strings too."""
    if isinstance(value, (int, float)):
        return int(value)
    s = str(value).strip()
    if re.fullmatch(r"\d+", s):
        return int(s)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    dt = datetime.fromisoformat(s)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(round(dt.timestamp() * 1000))


def _public(p):
    return {k: v for k, v in p.items() if not k.startswith("_")}


@app.post(BASE + "/payment/")
@app.post(BASE + "/payment")
async def create_payment(request: Request):
    body, perr = await _read_json(request)
    denied = _auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    if STATE["fail_create"]:
        return err(500, "Internal Server Error (stand-in fail_create)")
    agent_id = body.get("agentIdentifier")
    ifp = body.get("identifierFromPurchaser")
    if not isinstance(agent_id, str) or not isinstance(ifp, str):
        return err(400, "agentIdentifier and identifierFromPurchaser are required strings")
    if STATE["strict"]:
        if not (57 <= len(agent_id) <= 250):
            return err(400, "agentIdentifier must be 57-250 characters")
        if not (14 <= len(ifp) <= 26) or len(ifp) % 2 != 0 or not re.fullmatch(r"[0-9a-fA-F]+", ifp):
            return err(400, "identifierFromPurchaser must be 14-26 hex characters of even length")
    now_ms = int(time.time() * 1000)
    try:
        pay_by = _iso_to_ms(body["payByTime"]) if body.get("payByTime") is not None else now_ms + 12 * HOUR_MS
        submit = (
            _iso_to_ms(body["submitResultTime"])
            if body.get("submitResultTime") is not None
            else now_ms + 24 * HOUR_MS
        )
    except Exception as e:
        return err(400, f"Invalid time: {e}")
    if STATE["pay_by_ms"] is not None:
        pay_by = now_ms + int(STATE["pay_by_ms"])
    if STATE["submit_result_ms"] is not None:
        submit = now_ms + int(STATE["submit_result_ms"])
    bid = "mock_" + secrets.token_hex(16)
    payment = {
        "id": secrets.token_hex(12),
        "blockchainIdentifier": bid,
        "agentIdentifier": agent_id,
        "network": body.get("network"),
        "paymentType": body.get("paymentType"),
        "identifierFromPurchaser": ifp,
        "payByTime": str(pay_by),
        "submitResultTime": str(submit),
        "unlockTime": str(submit + 6 * HOUR_MS),
        "externalDisputeUnlockTime": str(submit + 12 * HOUR_MS),
        "inputHash": body.get("inputHash"),
        "resultHash": None,
        "onChainState": None,
        "NextAction": {
            "requestedAction": "WaitingForExternalAction",
            "errorType": None,
            "errorNote": None,
            "resultHash": None,
        },
    }
    with LOCK:
        STATE["payments"][bid] = payment
        STATE["polls"][bid] = 0
    return ok(_public(payment))


@app.post(BASE + "/payment/resolve-blockchain-identifier")
@app.post(BASE + "/payment/resolve-blockchain-identifier/")
async def resolve(request: Request):
    body, perr = await _read_json(request)
    denied = _auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    bid = body.get("blockchainIdentifier")
    with LOCK:
        p = STATE["payments"].get(bid)
        if p is None:
            return err(404, "Payment not found")
        STATE["polls"][bid] += 1
        n = STATE["polls"][bid]
        lop = STATE["lock_on_poll"]
        if p["onChainState"] is None and lop > 0 and n >= lop:
            p["onChainState"] = "FundsLocked"
        return ok(_public(p))


HEX = re.compile(r"[0-9a-fA-F]+")
DIGITS = re.compile(r"[0-9]+")
TIMES = ("payByTime", "submitResultTime", "unlockTime", "externalDisputeUnlockTime")


def _purchaser_auth(request: Request):
    key = STATE["purchaser_api_key"]
    if key is not None and request.headers.get("token") != key:
        return err(401, "Unauthorized, no authentication token provided")
    return None


def _validate_purchase(body):
    """The node's P1 schema (section 2.3): names and types. Unknown keys are dropped, as zod does, so the seller's
    spelling `sellerVKey` leaves `sellerVkey` missing."""
    for key in ("blockchainIdentifier", "network", "sellerVkey", "agentIdentifier", "identifierFromPurchaser",
                "inputHash") + TIMES:
        if not isinstance(body.get(key), str):
            return f"{key}: Required string"
    if body["network"] not in ("Preprod", "Mainnet"):
        return "network: Invalid enum value. Expected 'Preprod' | 'Mainnet'"
    if not (57 <= len(body["agentIdentifier"]) <= 250):
        return "agentIdentifier: String must contain between 57 and 250 character(s)"
    ifp = body["identifierFromPurchaser"]
    if not (14 <= len(ifp) <= 26) or len(ifp) % 2 != 0 or not HEX.fullmatch(ifp):
        return "identifierFromPurchaser: must be 14-26 hex characters of even length"
    if not HEX.fullmatch(body["inputHash"]):
        return "Input hash is not a valid hex string"
    for key in TIMES:
        if not DIGITS.fullmatch(body[key]):
            return f"{key}: must be a number of milliseconds as a string"
    return None


def _signed_fields_match(body, payment):
    """What the real node checks with the seller's signature: the request repeats the seller's values exactly."""
    if payment is None:
        return "Invalid blockchain identifier, format invalid"
    if body["identifierFromPurchaser"] != payment["identifierFromPurchaser"]:
        return "Invalid blockchain identifier, purchaser id mismatch"
    if body["agentIdentifier"] != payment["agentIdentifier"]:
        return "Invalid blockchain identifier, agent identifier mismatch"
    if body["inputHash"] != payment.get("inputHash") or any(body[k] != payment[k] for k in TIMES):
        return "Invalid blockchain identifier, signature invalid"
    return None


def _set_lock(purchase, payment):
    purchase["onChainState"] = "FundsLocked"
    purchase["NextAction"] = {"requestedAction": "WaitingForExternalAction", "errorType": None, "errorNote": None}
    purchase["CurrentTransaction"] = {"txHash": "tx_" + secrets.token_hex(8), "status": "Confirmed"}
    if payment is not None and payment["onChainState"] is None:
        payment["onChainState"] = "FundsLocked"


@app.post(BASE + "/purchase")
@app.post(BASE + "/purchase/")
async def create_purchase(request: Request):
    body, perr = await _read_json(request)
    denied = _purchaser_auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    problem = _validate_purchase(body)
    if problem:
        return err(400, problem)
    bid = body["blockchainIdentifier"]
    with LOCK:
        existing = STATE["purchases"].get(bid)
        if existing is not None:
            return JSONResponse(
                status_code=409,
                content={"status": "error", "error": {"message": "Purchase exists"}, "id": existing["id"],
                         "object": _public(existing)},
            )
        if STATE["purchase_mode"] == "refuse":
            return err(400, STATE["refuse_message"])
        problem = _signed_fields_match(body, STATE["payments"].get(bid))
        if problem:
            return err(400, problem)
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        purchase = {
            "id": "cl" + secrets.token_hex(11),
            "createdAt": now,
            "updatedAt": now,
            "blockchainIdentifier": bid,
            "agentIdentifier": body["agentIdentifier"],
            "pricingType": "Fixed",
            "payByTime": body["payByTime"],
            "submitResultTime": body["submitResultTime"],
            "unlockTime": body["unlockTime"],
            "externalDisputeUnlockTime": body["externalDisputeUnlockTime"],
            "onChainState": None,
            "NextAction": {"requestedAction": "FundsLockingRequested", "errorType": None, "errorNote": None},
            "inputHash": body["inputHash"],
            "resultHash": None,
            "PaidFunds": [{"amount": STATE["paid_amount"], "unit": ""}],
            "CurrentTransaction": None,
            "_mode": STATE["purchase_mode"],
        }
        STATE["purchases"][bid] = purchase
        STATE["purchase_polls"][bid] = 0
        if STATE["lost_purchase_answers"] > 0:
            STATE["lost_purchase_answers"] -= 1
            return err(500, "Internal Server Error")
        return ok(_public(purchase))


@app.post(BASE + "/purchase/resolve-blockchain-identifier")
@app.post(BASE + "/purchase/resolve-blockchain-identifier/")
async def resolve_purchase(request: Request):
    body, perr = await _read_json(request)
    denied = _purchaser_auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    if "includeHistory" in body and not isinstance(body["includeHistory"], str):
        return err(400, "includeHistory: Expected string")
    bid = body.get("blockchainIdentifier")
    with LOCK:
        purchase = STATE["purchases"].get(bid)
        if purchase is None:
            return err(404, "Purchase not found")
        STATE["purchase_polls"][bid] += 1
        payment = STATE["payments"].get(bid)
        now_ms = int(time.time() * 1000)
        if purchase["onChainState"] is None:
            if purchase["_mode"] == "lock":
                _set_lock(purchase, payment)
            elif now_ms > int(purchase["payByTime"]) + int(STATE["lock_grace_ms"]):
                purchase["onChainState"] = "FundsOrDatumInvalid"
                purchase["NextAction"] = {
                    "requestedAction": "WaitingForManualAction",
                    "errorType": "Unknown",
                    "errorNote": f"Purchase request payByTime ({purchase['payByTime']}) passed without on-chain lock",
                }
        # The seller's result, once on chain, is seen by the buyer too.
        if payment is not None and payment["onChainState"] == "ResultSubmitted" and purchase["onChainState"] == "FundsLocked":
            purchase["onChainState"] = "ResultSubmitted"
            purchase["resultHash"] = payment["resultHash"]
        return ok(_public(purchase))


@app.post(BASE + "/purchase/request-refund")
@app.post(BASE + "/purchase/request-refund/")
async def request_refund(request: Request):
    body, perr = await _read_json(request)
    denied = _purchaser_auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    bid = body.get("blockchainIdentifier")
    with LOCK:
        purchase = STATE["purchases"].get(bid)
        if STATE["refund_conflicts"] > 0:
            STATE["refund_conflicts"] -= 1
            return err(409, "Purchase state changed concurrently; retry against the new state")
        if (
            purchase is None
            or purchase["onChainState"] not in ("FundsLocked", "ResultSubmitted")
            or purchase["NextAction"]["requestedAction"] != "WaitingForExternalAction"
            or purchase["CurrentTransaction"] is None
        ):
            return err(404, "Purchase not found or not in valid state")
        purchase["NextAction"] = {"requestedAction": "SetRefundRequestedRequested", "errorType": None, "errorNote": None}
        return ok(_public(purchase))


@app.get("/_purchases")
async def get_purchases():
    with LOCK:
        return {
            "purchases": {
                k: dict(_public(v), _polls=STATE["purchase_polls"].get(k, 0)) for k, v in STATE["purchases"].items()
            }
        }


@app.post(BASE + "/payment/submit-result")
@app.post(BASE + "/payment/submit-result/")
async def submit_result(request: Request):
    body, perr = await _read_json(request)
    denied = _auth(request)
    if denied:
        return denied
    if perr is not None or not isinstance(body, dict):
        return err(400, "Invalid JSON body")
    bid = body.get("blockchainIdentifier")
    h = body.get("submitResultHash")
    with LOCK:
        p = STATE["payments"].get(bid)
        if p is None:
            return err(404, "Payment not found")
        if not isinstance(h, str) or not re.fullmatch(r"[0-9a-f]{64}", h):
            return err(400, "submitResultHash must be 64 lowercase hex characters")
        p["resultHash"] = h
        p["onChainState"] = "ResultSubmitted"
        p["NextAction"] = {
            "requestedAction": "SubmitResultRequested",
            "errorType": None,
            "errorNote": None,
            "resultHash": h,
        }
        return ok(_public(p))


@app.get(BASE + "/health")
@app.get(BASE + "/health/")
async def health(request: Request):
    return ok({"status": "ok"})


@app.get("/_log")
async def get_log():
    with LOCK:
        return {"requests": list(STATE["log"])}


@app.get("/_payments")
async def get_payments():
    with LOCK:
        return {
            "payments": {k: dict(_public(v), _polls=STATE["polls"].get(k, 0)) for k, v in STATE["payments"].items()}
        }


@app.post("/_config")
async def set_config(request: Request):
    body = await request.json()
    with LOCK:
        keys = ("lock_on_poll", "strict", "fail_create", "api_key", "purchaser_api_key", "purchase_mode",
                "refuse_message", "pay_by_ms", "submit_result_ms", "lock_grace_ms", "refund_conflicts",
                "lost_purchase_answers", "paid_amount")
        for k in keys:
            if k in body:
                STATE[k] = body[k]
        return {k: STATE[k] for k in keys}


@app.post("/_lock")
async def force_lock(request: Request):
    body = await request.json()
    bid = body.get("blockchainIdentifier")
    with LOCK:
        p = STATE["payments"].get(bid)
        if p is None:
            return err(404, "Payment not found")
        if p["onChainState"] is None:
            p["onChainState"] = "FundsLocked"
        return ok(_public(p))


@app.post("/_reset")
async def reset():
    with LOCK:
        STATE["payments"].clear()
        STATE["polls"].clear()
        STATE["purchases"].clear()
        STATE["purchase_polls"].clear()
        STATE["log"].clear()
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
