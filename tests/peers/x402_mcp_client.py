#!/usr/bin/env python3
"""An MCP host that pays for tools with x402: the official MCP SDK's client session (mcp 1.30.0,
Streamable HTTP) wrapped by the official x402 SDK's `x402MCPSession` (x402 2.25.0, `x402.mcp`),
which follows x402's MCP transport: a paid tool answers a result with `isError` and the
PaymentRequired in `structuredContent`; the session signs one of its offers and calls again with
the PaymentPayload in `_meta["x402/payment"]`; the answer carries the settlement in
`_meta["x402/payment-response"]`.

Makes one tool call and prints one JSON line:
  {"is_error": bool, "payment_made": bool, "text": "<the first content item's text>",
   "structured": {…} | null, "payment_response": {…} | null}

  x402_mcp_client.py --url URL --tool NAME [--arguments JSON]
                     [--key KEY --asset ADDR [--network eip155:31337] [--max-amount N]]
Without --key the call is made once, unpaid (the payment-required result, for one).
"""

import argparse
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from x402 import x402Client
from x402.mcp import x402MCPSession
from x402_wallet import paying_client


def plain(value):
    """A pydantic model or a dict, as JSON-ready data."""
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True, exclude_none=True)
    return value


async def run(args):
    client = paying_client(args.key, args.asset, args.network, args.max_amount) if args.key else x402Client()
    async with streamablehttp_client(args.url) as (read, write, _session_id):
        async with ClientSession(read, write) as session:
            paying = x402MCPSession(session, client, auto_payment=bool(args.key))
            await paying.initialize()
            result = await paying.call_tool(args.tool, json.loads(args.arguments))
    raw = result.raw_result
    first = result.content[0] if result.content else None
    return {
        "is_error": result.is_error,
        "payment_made": result.payment_made,
        "text": getattr(first, "text", None),
        "structured": getattr(raw, "structuredContent", None),
        "payment_response": plain(result.payment_response),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--arguments", default="{}")
    ap.add_argument("--key")
    ap.add_argument("--asset")
    ap.add_argument("--network", default="eip155:31337")
    ap.add_argument("--max-amount", type=int, default=1_000_000)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
