#!/usr/bin/env python3
"""A paid agent for the x402 tests: a minimal MIP-003 agent
(https://github.com/masumi-network/masumi-improvement-proposals, MIPs/MIP-003) whose POST
/start_job costs a fixed price in x402 v2, charged the way the official x402 SDK (x402 2.25.0)
serves a paid route: its FastAPI `payment_middleware` in front of the app, a resource server
verifying and settling through a facilitator over HTTP (x402_facilitator.py).

  GET  /availability     free  -> {"status": "available", "type": "masumi-agent", "message": …}
  GET  /input_schema     free  -> {"input_data": [{"id": "text", "type": "text", …}]}
  POST /start_job        paid  -> body {"identifier_from_purchaser", "input_data": {"text"}}:
                                  {"id", "job_id", "identifierFromPurchaser"}; the job is done at
                                  once, its result the text upper-cased. Without payment: 402 with
                                  PAYMENT-REQUIRED; paid: 200 with PAYMENT-RESPONSE (the middleware
                                  settles only after a 2xx, so a 422 costs nothing)
  GET  /status?job_id=   free  -> {"id", "job_id", "status": "completed", "result"}; 404 unknown
Test helper (not MIP-003):
  GET  /_jobs            free  -> {"jobs": [{"job_id", "identifier_from_purchaser", "input_data",
                                  "payer"}, …]}: every job started, in order, with the payer the
                                  middleware verified

The price is an asset amount, not "$0.01": the SDK knows no default asset on a local chain
(eip155:31337), so a money price would fail. Command line:
  x402_agent.py --facilitator URL --asset ADDR --pay-to ADDR --price N
                [--network eip155:31337] [--name USDC] [--version 2] [--max-timeout 300]
                [--facilitator-auth VALUE] [--port N]
    --price             atomic units of the asset (6 decimals: 10000 is 0.01)
    --name/--version    the asset's EIP-712 domain, sent as the requirement's `extra`
    --facilitator-auth  sent as the Authorization header of every call to the facilitator

Binds 127.0.0.1:0 (or --port), prints one line "PORT=<n>" once listening; exits when stdin
closes, on SIGTERM, or when its parent dies (peer_lifecycle.py).
"""

import argparse
import contextlib
import sys
import threading
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.http.facilitator_client_base import AuthHeaders
from x402.http.middleware.fastapi import payment_middleware
from x402.mechanisms.evm.exact import register_exact_evm_server

import peer_lifecycle

INPUT_SCHEMA = {
    "input_data": [
        {
            "id": "text",
            "type": "text",
            "name": "Text",
            "data": {"placeholder": "hello world", "description": "Text to upper-case"},
        }
    ]
}


class StartJob(BaseModel):
    identifier_from_purchaser: str
    input_data: dict = {}


class StaticAuth:
    """The SDK's AuthProvider protocol: one Authorization header on every facilitator call."""

    def __init__(self, value):
        self._headers = {"Authorization": value}

    def get_auth_headers(self):
        return AuthHeaders(verify=self._headers, settle=self._headers, supported=self._headers)


def build_app(args):
    config = FacilitatorConfig(
        url=args.facilitator,
        auth_provider=StaticAuth(args.facilitator_auth) if args.facilitator_auth else None,
    )
    server = x402ResourceServer(HTTPFacilitatorClient(config))
    register_exact_evm_server(server, args.network)
    routes = {
        "POST /start_job": {
            "accepts": {
                "scheme": "exact",
                "network": args.network,
                "payTo": args.pay_to,
                "price": {
                    "amount": str(args.price),
                    "asset": args.asset,
                    "extra": {"name": args.name, "version": args.version},
                },
                "maxTimeoutSeconds": args.max_timeout,
            },
            "description": "start a job of the x402 test agent",
            "mimeType": "application/json",
        }
    }

    app = FastAPI()
    jobs = {}
    started = []
    lock = threading.Lock()

    @app.get("/availability")
    def availability():
        return {"status": "available", "type": "masumi-agent", "message": "paid per job in x402"}

    @app.get("/input_schema")
    def input_schema():
        return INPUT_SCHEMA

    @app.post("/start_job")
    def start_job(body: StartJob, request: Request):
        job_id = str(uuid.uuid4())
        payload = getattr(request.state, "payment_payload", None)
        payer = None
        if payload is not None:
            payer = (payload.payload.get("authorization") or {}).get("from")
        with lock:
            jobs[job_id] = str(body.input_data.get("text", "")).upper()
            started.append(
                {
                    "job_id": job_id,
                    "identifier_from_purchaser": body.identifier_from_purchaser,
                    "input_data": body.input_data,
                    "payer": payer,
                }
            )
        return {"id": job_id, "job_id": job_id, "identifierFromPurchaser": body.identifier_from_purchaser}

    @app.get("/status")
    def status(job_id: str):
        with lock:
            result = jobs.get(job_id)
        if result is None:
            return JSONResponse({"detail": "Job not found"}, status_code=404)
        return {"id": job_id, "job_id": job_id, "status": "completed", "result": result}

    @app.get("/_jobs")
    def list_jobs():
        with lock:
            return {"jobs": list(started)}

    # Created once, here, not per request (the SDK docstring's example would re-initialise it on
    # each request). Creating it fetches the facilitator's /supported; the SDK prints a failure to
    # stdout, which carries only the PORT= line: it goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        app.middleware("http")(payment_middleware(routes, server))
    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facilitator", required=True, help="the facilitator's base URL")
    ap.add_argument("--asset", required=True, help="the token's address")
    ap.add_argument("--pay-to", required=True, help="the address paid")
    ap.add_argument("--price", required=True, type=int, help="atomic units per job")
    ap.add_argument("--network", default="eip155:31337")
    ap.add_argument("--name", default="USDC", help="the token's EIP-712 name")
    ap.add_argument("--version", default="2", help="the token's EIP-712 version")
    ap.add_argument("--max-timeout", type=int, default=300, help="maxTimeoutSeconds")
    ap.add_argument("--facilitator-auth", help="the Authorization header sent to the facilitator")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    app = build_app(args)
    peer_lifecycle.run(
        peer_lifecycle.bind(args.port),
        app,
        announce="PORT={port}",
        log_level="warning",
        watch_stdin_env="AGENT_WATCH_STDIN",
    )


if __name__ == "__main__":
    main()
