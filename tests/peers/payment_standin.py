#!/usr/bin/env python3
"""Offline stand-in for the Masumi payment service (DIALECTS.md section 6.2).

Serves, under the base path /api/v1 (so PAYMENT_SERVICE_URL=http://127.0.0.1:<port>/api/v1):
  P1  POST /api/v1/payment/                                 (also without the trailing slash)
  P2  POST /api/v1/payment/resolve-blockchain-identifier    (also with a trailing slash)
  P3  POST /api/v1/payment/submit-result                    (also with a trailing slash)
      GET  /api/v1/health                                   -> {"status":"success","data":{"status":"ok"}}
Test helpers (not part of the real node):
      GET  /_log       -> {"requests":[{"seq","t","method","path","token","body"}, ...]}  every request received
      GET  /_payments  -> {"payments":{<blockchainIdentifier>: <payment object + "_polls">}}
      POST /_config    -> body: any of {"lock_on_poll":int, "strict":bool, "fail_create":bool, "api_key":str|null}
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
  STANDIN_API_KEY       if set, every /api/v1 request must carry header `token: <value>`, else 401.
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
    "payments": {},  # blockchainIdentifier -> payment dict
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
        for k in ("lock_on_poll", "strict", "fail_create", "api_key"):
            if k in body:
                STATE[k] = body[k]
        return {k: STATE[k] for k in ("lock_on_poll", "strict", "fail_create", "api_key")}


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
