#!/usr/bin/env python3
"""An x402 facilitator for the tests: the official x402 SDK's (x402 2.25.0) verify and settle
logic behind the facilitator HTTP API of the x402 spec
(https://github.com/coinbase/x402/blob/main/specs/x402-specification-v2.md, "Facilitator"),
settling on a local EVM node. The SDK ships the logic, not a server: this file is the server.

  GET  /supported  -> the SDK's SupportedResponse: the `exact` kind on --network (v2) and the SDK's
                      v1 networks, the `upto` kind on --network, and the signer's address
  POST /verify     -> body {"x402Version", "paymentPayload", "paymentRequirements"}: VerifyResponse
  POST /settle     -> the same body: SettleResponse (settles with transferWithAuthorization,
                      paying the gas from --key's account)
A refusal is a 200 with isValid/success false, as the SDK's facilitator client expects (it
raises on any other status); a body the SDK cannot parse is a 400 {"error": …}.

Test helpers (not part of the API, never behind --auth):
  GET  /log        -> {"requests": [{"method", "path", "authorization", "status", "body"}, …]}
                      every request to the three routes above, in the order answered: what a
                      proxy sent, with the Authorization header it carried (null when none)
  POST /_hold      -> {}: from now on each /settle waits, before anything is sent to the chain,
                      until /_release says what to do with it
  GET  /_held      -> {"waiting": N}: the settles waiting
  POST /_release   -> body {"send": true|false}: the waiting settles go on (true: settled on
                      chain as usual, whether or not their caller is still there) or are dropped
                      (false: answered 503, nothing sent); holding ends

Command line:
  x402_facilitator.py --rpc URL --key KEY [--network eip155:31337] [--auth VALUE] [--port N]
    --key   the private key the facilitator signs settlements with (the tests: anvil's account 1)
    --auth  if given, /supported, /verify and /settle answer 401 unless the request's
            Authorization header is exactly VALUE (e.g. "Bearer s3cret")

Binds 127.0.0.1:0 (or --port), prints one line "PORT=<n>" once listening; exits when stdin
closes, on SIGTERM, or when its parent dies (peer_lifecycle.py).
"""

import argparse
import json
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from x402 import x402FacilitatorSync
from x402.mechanisms.evm import FacilitatorWeb3Signer
from x402.mechanisms.evm.exact import register_exact_evm_facilitator
from x402.mechanisms.evm.upto import UptoEvmFacilitatorScheme
from x402.schemas import parse_payment_payload, parse_payment_requirements

import peer_lifecycle


class Dropped(Exception):
    """A settle held by /_hold that /_release dropped."""


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True)


def build_app(rpc, key, network, auth):
    signer = FacilitatorWeb3Signer(private_key=key, rpc_url=rpc)
    facilitator = x402FacilitatorSync()
    register_exact_evm_facilitator(facilitator, signer, networks=network)
    # `upto` has no register_* helper in 2.25.0: the scheme is registered by hand.
    facilitator.register([network], UptoEvmFacilitatorScheme(signer))

    app = FastAPI()
    log = []
    log_lock = threading.Lock()

    def record(request, status, body):
        with log_lock:
            log.append(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "authorization": request.headers.get("authorization"),
                    "status": status,
                    "body": body,
                }
            )

    # The settles held by /_hold, and what /_release decided for them.
    held = {"on": False, "waiting": 0, "send": None}
    held_change = threading.Condition()

    def wait_if_held():
        """Blocks a settle while holding is on; whether it may go on."""
        with held_change:
            if not held["on"]:
                return True
            held["waiting"] += 1
            held_change.notify_all()
            held_change.wait_for(lambda: held["send"] is not None)
            held["waiting"] -= 1
            return held["send"]

    def refused(request, body):
        """A 401 answer if --auth is set and the request does not carry it, else None."""
        if auth is not None and request.headers.get("authorization") != auth:
            record(request, 401, body)
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return None

    @app.get("/supported")
    def supported(request: Request):
        if (answer := refused(request, None)) is not None:
            return answer
        record(request, 200, None)
        return dump(facilitator.get_supported())

    async def verify_or_settle(request, call):
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            record(request, 400, raw.decode("utf-8", "replace"))
            return JSONResponse({"error": "the body is not JSON"}, status_code=400)
        if (answer := refused(request, body)) is not None:
            return answer
        try:
            payload = parse_payment_payload(body["paymentPayload"])
            requirements = parse_payment_requirements(
                body.get("x402Version", payload.x402_version), body["paymentRequirements"]
            )
        except Exception as e:  # a malformed body, whichever way: the SDK raises several types
            record(request, 400, body)
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=400)
        try:
            # The SDK's sync signer blocks on the RPC: off the event loop.
            result = await run_in_threadpool(call, payload, requirements)
        except Dropped:
            raise
        except Exception as e:  # no scheme for (scheme, network), an aborted hook
            record(request, 400, body)
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=400)
        record(request, 200, body)
        return dump(result)

    @app.post("/verify")
    async def verify(request: Request):
        return await verify_or_settle(request, facilitator.verify)

    def settle_unless_dropped(payload, requirements):
        if not wait_if_held():
            raise Dropped("held by the test, and dropped: nothing was sent")
        return facilitator.settle(payload, requirements)

    @app.post("/settle")
    async def settle(request: Request):
        try:
            return await verify_or_settle(request, settle_unless_dropped)
        except Dropped as e:
            record(request, 503, None)
            return JSONResponse({"error": str(e)}, status_code=503)

    @app.post("/_hold")
    def hold():
        with held_change:
            held.update(on=True, send=None)
        return {}

    @app.get("/_held")
    def waiting():
        with held_change:
            return {"waiting": held["waiting"]}

    @app.post("/_release")
    async def release(request: Request):
        send = bool((await request.json()).get("send"))
        with held_change:
            held.update(on=False, send=send)
            held_change.notify_all()
        return {}

    @app.get("/log")
    def get_log():
        with log_lock:
            return {"requests": list(log)}

    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rpc", required=True, help="the EVM node's JSON-RPC URL")
    ap.add_argument("--key", required=True, help="the settling account's private key")
    ap.add_argument("--network", default="eip155:31337", help="the CAIP-2 network settled on")
    ap.add_argument("--auth", help="the Authorization header value every API request must carry")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    app = build_app(args.rpc, args.key, args.network, args.auth)
    peer_lifecycle.run(
        peer_lifecycle.bind(args.port),
        app,
        announce="PORT={port}",
        log_level="warning",
        watch_stdin_env="FACILITATOR_WATCH_STDIN",
    )


if __name__ == "__main__":
    main()
