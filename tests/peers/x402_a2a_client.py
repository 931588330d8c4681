#!/usr/bin/env python3
"""An A2A client that pays for a task in band, as the A2A x402 extension (v0.2,
https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2/spec.md) says: the
official a2a-sdk client (a2a-sdk 1.3.0, JSON-RPC 1.0), the extension activated by the
`A2A-Extensions` header; the payment signed by the official x402 SDK's client (x402 2.25.0) from
the requirements the input-required task carries. No package ships the extension's client side
for a2a-sdk 1.x: these few steps are its flow.

  1. SendMessage (blocking) without payment: a task, input-required, whose status message's
     metadata has x402.payment.status "payment-required" and x402.payment.required;
  2. SendMessage (blocking) on that task, metadata x402.payment.status "payment-submitted" and
     x402.payment.payload (the SDK's PaymentPayload): the task runs to its end, and its status
     message's metadata has "payment-completed" and x402.payment.receipts.

Prints one JSON line: {"card_extensions": [...], "first": {"state", "metadata"}, "second":
{"state", "metadata", "artifact_text"} | null, "task_id"}.

  x402_a2a_client.py --url URL --text TEXT [--key KEY --asset ADDR [--network eip155:31337]
                     [--max-amount N]] [--extension URI]
Without --key the first message only is sent.
"""

import argparse
import asyncio
import json
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict
from x402.schemas.helpers import parse_payment_required
from a2a_x402 import EXTENSION, metadata_of
from x402_wallet import paying_client


def seen(task):
    status = task.status
    metadata = metadata_of(status.message if status.HasField("message") else None)
    text = "".join(p.text for a in task.artifacts for p in a.parts if p.HasField("text"))
    return {"state": TaskState.Name(status.state), "metadata": metadata, "artifact_text": text or None}


async def send(client, message):
    last = None
    async for ev in client.send_message(SendMessageRequest(message=message)):
        if ev.WhichOneof("payload") == "task":
            last = ev.task
    return last


async def run(args):
    headers = {"A2A-Extensions": args.extension}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        factory = ClientFactory(
            ClientConfig(httpx_client=http, streaming=False, polling=False, supported_protocol_bindings=["JSONRPC"])
        )
        card = await A2ACardResolver(http, args.url).get_agent_card()
        extensions = [MessageToDict(e) for e in card.capabilities.extensions]
        client = factory.create(card)
        ask = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=args.text)])
        first = await send(client, ask)
        out = {"card_extensions": extensions, "first": seen(first), "second": None, "task_id": first.id}
        if not args.key:
            return out
        required = parse_payment_required(out["first"]["metadata"]["x402.payment.required"])
        wallet = paying_client(args.key, args.asset, args.network, args.max_amount)
        payload = await wallet.create_payment_payload(required)
        pay = Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            task_id=first.id,
            parts=[Part(text="Here is the payment authorization.")],
        )
        pay.metadata.update(
            {
                "x402.payment.status": "payment-submitted",
                "x402.payment.payload": payload.model_dump(by_alias=True, exclude_none=True),
            }
        )
        out["second"] = seen(await send(client, pay))
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--key")
    ap.add_argument("--asset")
    ap.add_argument("--network", default="eip155:31337")
    ap.add_argument("--max-amount", type=int, default=1_000_000)
    ap.add_argument("--extension", default=EXTENSION)
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
