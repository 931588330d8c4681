#!/usr/bin/env python3
"""A paying client for the x402 tests: the official x402 SDK's (x402 2.25.0) httpx transport,
which answers a 402 by signing an EIP-3009 authorization (`exact` on EVM) and retrying with
PAYMENT-SIGNATURE (the x402 v2 HTTP transport,
https://github.com/coinbase/x402/blob/main/specs/transports-v2/http.md).

Makes one request and prints one JSON line:
  {"status": 200, "body": <JSON, or text>, "sent": N,
   "payment_signature": "<base64>" | null,  the PAYMENT-SIGNATURE of the last request sent
   "payment_required": {…} | null,          PAYMENT-REQUIRED of the answer, decoded
   "payment_response": {…} | null}          PAYMENT-RESPONSE of the answer, decoded
`sent` counts the requests that went on the wire (2 when a 402 was paid).

Modes:
  --key KEY --asset ADDR   pay (`exact` or `upto`, whichever the 402 offers first): the SDK client
                           with KEY's account; its spend controls allow ADDR
                           on --network up to --max-amount (by default the SDK pays only its known
                           assets, and a local chain's token is none of them)
  --signature SIG          replay: send the request once with PAYMENT-SIGNATURE: SIG, no paying
  neither                  a plain request (the 402 and its PAYMENT-REQUIRED, for one)

  x402_client.py --url URL [--method POST] [--json BODY] [--header "Name: value"]…
                 [--key KEY --asset ADDR [--network eip155:31337] [--max-amount N] | --signature SIG]
"""

import argparse
import asyncio
import base64
import json
import sys

import httpx
from x402.http.clients.httpx import x402AsyncTransport
from x402_wallet import paying_client


class Recording(httpx.AsyncBaseTransport):
    """The wire under the SDK's transport: keeps each request's PAYMENT-SIGNATURE."""

    def __init__(self):
        self._inner = httpx.AsyncHTTPTransport()
        self.signatures = []

    async def handle_async_request(self, request):
        self.signatures.append(request.headers.get("payment-signature"))
        return await self._inner.handle_async_request(request)

    async def aclose(self):
        await self._inner.aclose()


def decode_header(value):
    """A header's base64 JSON (standard alphabet, padded, as the SDK writes it), or None."""
    if value is None:
        return None
    return json.loads(base64.b64decode(value))


async def run(args):
    wire = Recording()
    if args.key:
        client = paying_client(args.key, args.asset, args.network, args.max_amount)
        transport = x402AsyncTransport(client, transport=wire)
    else:
        transport = wire
    headers = {}
    for h in args.header:
        name, _, value = h.partition(":")
        headers[name.strip()] = value.strip()
    if args.signature:
        headers["PAYMENT-SIGNATURE"] = args.signature
    content = None
    if args.json is not None:
        content = args.json.encode()
        headers.setdefault("Content-Type", "application/json")
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        response = await http.request(args.method, args.url, content=content, headers=headers)
    try:
        body = response.json()
    except ValueError:
        body = response.text
    return {
        "status": response.status_code,
        "body": body,
        "sent": len(wire.signatures),
        "payment_signature": wire.signatures[-1] if wire.signatures else None,
        "payment_required": decode_header(response.headers.get("payment-required")),
        "payment_response": decode_header(response.headers.get("payment-response")),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--method", default="POST")
    ap.add_argument("--json", help="the request body, JSON text")
    ap.add_argument("--header", action="append", default=[], help='"Name: value", repeatable')
    ap.add_argument("--key", help="the payer's private key: pay a 402")
    ap.add_argument("--asset", help="the token the payer may pay in (with --key)")
    ap.add_argument("--network", default="eip155:31337")
    ap.add_argument("--max-amount", type=int, default=1_000_000, help="the most one payment may cost")
    ap.add_argument("--signature", help="a PAYMENT-SIGNATURE to send as it is (replay)")
    args = ap.parse_args()
    if args.key and args.signature:
        ap.error("--key pays, --signature replays: one or the other")
    if args.key and not args.asset:
        ap.error("--key needs --asset")
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
