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

With --x402-version 1 the route is paid as x402 version 1 servers did
(https://github.com/coinbase/x402/blob/main/specs/x402-specification-v1.md): a 402 whose JSON body
is the PaymentRequired (`x402Version: 1`, `maxAmountRequired`, the network by name, e.g.
"base-sepolia"), the payment in `X-PAYMENT`, the receipt in `X-PAYMENT-RESPONSE`. The SDK 2.25.0
serves version 2 only, so this mode is a small middleware of ours on the SDK's version 1 models
and its facilitator client (verify before the handler, settle after a 2xx, as the SDK's own).

The price is an asset amount, not "$0.01": the SDK knows no default asset on a local chain
(eip155:31337), so a money price would fail. Command line:
  x402_agent.py --facilitator URL --asset ADDR --pay-to ADDR --price N
                [--network eip155:31337] [--name USDC] [--version 2] [--max-timeout 300]
                [--facilitator-auth VALUE] [--x402-version 2|1] [--port N]
    --price             atomic units of the asset (6 decimals: 10000 is 0.01)
    --name/--version    the asset's EIP-712 domain, sent as the requirement's `extra`
    --facilitator-auth  sent as the Authorization header of every call to the facilitator

Binds 127.0.0.1:0 (or --port), prints one line "PORT=<n>" once listening; exits when stdin
closes, on SIGTERM, or when its parent dies (peer_lifecycle.py).
"""

import argparse
import base64
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
from x402.schemas.v1 import PaymentPayloadV1, PaymentRequiredV1, PaymentRequirementsV1

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


def version_1_middleware(args, facilitator):
    """x402 version 1 in front of POST /start_job: 402 with the demand in the body until an
    X-PAYMENT the facilitator verifies; settled once the handler answered 2xx."""
    requirements = PaymentRequirementsV1(
        scheme="exact",
        network=args.network,
        max_amount_required=str(args.price),
        resource="/start_job",
        description="start a job of the x402 test agent",
        mime_type="application/json",
        pay_to=args.pay_to,
        max_timeout_seconds=args.max_timeout,
        asset=args.asset,
        extra={"name": args.name, "version": args.version},
    )

    def demand(error):
        doc = PaymentRequiredV1(error=error, accepts=[requirements])
        return JSONResponse(doc.model_dump(by_alias=True, exclude_none=True, mode="json"), status_code=402)

    async def middleware(request: Request, call_next):
        if (request.method, request.url.path) != ("POST", "/start_job"):
            return await call_next(request)
        header = request.headers.get("x-payment")
        if not header:
            return demand("X-PAYMENT header is required")
        try:
            payload = PaymentPayloadV1.model_validate_json(base64.b64decode(header))
        except Exception as e:  # noqa: BLE001
            return demand(f"invalid X-PAYMENT: {e}")
        verified = await facilitator.verify(payload, requirements)
        if not verified.is_valid:
            return demand(verified.invalid_reason or "invalid payment")
        request.state.payment_payload = payload
        response = await call_next(request)
        if not 200 <= response.status_code < 300:
            return response
        settled = await facilitator.settle(payload, requirements)
        if not settled.success:
            return demand(settled.error_reason or "settlement failed")
        receipt = settled.model_dump_json(by_alias=True, exclude_none=True).encode()
        response.headers["X-PAYMENT-RESPONSE"] = base64.b64encode(receipt).decode()
        return response

    return middleware


def build_app(args):
    config = FacilitatorConfig(
        url=args.facilitator,
        auth_provider=StaticAuth(args.facilitator_auth) if args.facilitator_auth else None,
    )
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

    if args.x402_version == 1:
        app.middleware("http")(version_1_middleware(args, HTTPFacilitatorClient(config)))
        return app
    server = x402ResourceServer(HTTPFacilitatorClient(config))
    register_exact_evm_server(server, args.network)
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
    ap.add_argument("--x402-version", type=int, choices=[1, 2], default=2)
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
