#!/usr/bin/env python3
"""A Masumi purchaser built on the real `masumi==1.2.0` package's own purchase client.

Buys one job from a MIP-003 service the way a masumi user does: `start_job`, then `masumi.purchase.Purchase`
(with `masumi.config.Config`) built from the answer's fields, `await purchase.create_purchase_request()`
(P1 on the buyer's payment node), then `/status` until the job ends, then the purchase as the node sees it
(P2: masumi 1.2.0's Purchase has no method for it, so a plain aiohttp POST to
`purchase/resolve-blockchain-identifier` with includeHistory "false").

Usage:
  masumi_buyer.py --agent <base URL of the MIP-003 service> --node <payment node base URL, …/api/v1>
                  --token <purchaser API key> --input '<input_data as JSON>' [--identifier <hex>]
                  [--network Preprod] [--timeout 60] [--poll 0.2] [--no-pay] [--bearer <token>]
                  [--job '<a start_job answer as JSON>']

  --identifier  identifier_from_purchaser; default a fresh 16-hex-character one
  --timeout     seconds to wait for a final status (completed / failed)
  --poll        seconds between /status polls
  --no-pay      make no purchase (P1 and P2 are skipped)
  --bearer      send `Authorization: Bearer <token>` to the service (a credit holder, not a Masumi buyer)
  --job         pay for a job asked for before (this is its start_job answer, for --identifier and
                --input): no start_job is sent

Prints exactly one JSON line on stdout (masumi's logs go to stderr):
  start_job refused (non-2xx): {"start_status": <n>, "start_body": <body>}, exit 2
  otherwise: {"job_id", "start": <start_job answer>, "statuses": [each /status value, in order, repeats
  dropped], "final": <last /status body>, "input_hash": masumi's create_masumi_input_hash(input_data,
  identifier), "output_hash": masumi's create_masumi_output_hash(result, identifier) of the final
  `result` string (null if it is not a string), "purchase": <P2's data once the job ended, or null>,
  "purchase_error": <why there is no purchase: P1's or P2's error text, or null>}; exit 0 when the job
  reached completed or failed, 1 on timeout.
"""

import os
import sys

# ---- must happen before `import masumi` (see masumi_agent.py: masumi loads a .env found upward from
# site-packages at import) ---------------------------------------------------------------------------
os.environ["PYTHON_DOTENV_DISABLED"] = "1"
import dotenv  # noqa: E402

dotenv.load_dotenv = lambda *a, **k: False
# ------------------------------------------------------------------------------------------------------

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import secrets  # noqa: E402
import time  # noqa: E402

import aiohttp  # noqa: E402
import masumi  # noqa: E402
from masumi.config import Config  # noqa: E402
from masumi.helper_functions import create_masumi_input_hash, create_masumi_output_hash  # noqa: E402
from masumi.purchase import Purchase  # noqa: E402

FINAL = ("completed", "failed")


async def _body(resp):
    text = await resp.text()
    try:
        return json.loads(text)
    except ValueError:
        return text


async def start_job(http, args, identifier, input_data, headers):
    async with http.post(
        f"{args.agent}/start_job",
        json={"identifier_from_purchaser": identifier, "input_data": input_data},
        headers=headers,
    ) as resp:
        return resp.status, await _body(resp)


async def follow(http, args, job_id, headers):
    """Polls /status until a final status or the timeout: (statuses seen, last body, reached final)."""
    statuses, last = [], None
    deadline = time.monotonic() + args.timeout
    while True:
        async with http.get(f"{args.agent}/status", params={"job_id": job_id}, headers=headers) as resp:
            body = await _body(resp)
        if resp.status == 200 and isinstance(body, dict):
            last = body
            status = body.get("status")
            if not statuses or statuses[-1] != status:
                statuses.append(status)
            if status in FINAL:
                return statuses, last, True
        if time.monotonic() >= deadline:
            return statuses, last, False
        await asyncio.sleep(args.poll)


async def resolve_purchase(http, args, blockchain_identifier):
    """P2 on the buyer's node: (purchase, error text)."""
    async with http.post(
        f"{args.node}/purchase/resolve-blockchain-identifier",
        json={"blockchainIdentifier": blockchain_identifier, "network": args.network, "includeHistory": "false"},
        headers={"token": args.token},
    ) as resp:
        body = await _body(resp)
        if resp.status != 200:
            return None, f"{resp.status}: {json.dumps(body) if not isinstance(body, str) else body}"
        return body.get("data"), None


async def buy(args):
    input_data = json.loads(args.input)
    identifier = args.identifier or secrets.token_hex(8)
    headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else {}
    async with aiohttp.ClientSession() as http:
        if args.job:
            status, start = 200, json.loads(args.job)
        else:
            status, start = await start_job(http, args, identifier, input_data, headers)
        if not 200 <= status < 300 or not isinstance(start, dict):
            return {"start_status": status, "start_body": start}, 2
        purchase, purchase_error = None, None
        if not args.no_pay:
            # Exactly the fields a masumi user passes, from the answer (sellerVKey, with a capital K).
            bought = Purchase(
                config=Config(payment_service_url=args.node, payment_api_key=args.token),
                blockchain_identifier=start["blockchainIdentifier"],
                seller_vkey=start["sellerVKey"],
                agent_identifier=start["agentIdentifier"],
                pay_by_time=start["payByTime"],
                submit_result_time=start["submitResultTime"],
                unlock_time=start["unlockTime"],
                external_dispute_unlock_time=start["externalDisputeUnlockTime"],
                identifier_from_purchaser=identifier,
                network=args.network,
                input_data=input_data,
            )
            try:
                await bought.create_purchase_request()
            except (ValueError, aiohttp.ClientError) as e:
                purchase_error = f"create_purchase_request: {e}"
        job_id = start.get("job_id") or start.get("id")
        statuses, final, ended = await follow(http, args, job_id, headers)
        if ended and not args.no_pay and purchase_error is None:
            purchase, purchase_error = await resolve_purchase(http, args, start["blockchainIdentifier"])
    result = final.get("result") if isinstance(final, dict) else None
    return {
        "job_id": job_id,
        "start": start,
        "statuses": statuses,
        "final": final,
        "input_hash": create_masumi_input_hash(input_data, identifier),
        "output_hash": create_masumi_output_hash(result, identifier) if isinstance(result, str) else None,
        "purchase": purchase,
        "purchase_error": purchase_error,
    }, (0 if ended else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--identifier")
    ap.add_argument("--network", default="Preprod")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--no-pay", action="store_true")
    ap.add_argument("--bearer")
    ap.add_argument("--job")
    args = ap.parse_args()
    args.agent, args.node = args.agent.rstrip("/"), args.node.rstrip("/")
    assert masumi.__version__ == "1.2.0", masumi.__version__
    out, code = asyncio.run(buy(args))
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
