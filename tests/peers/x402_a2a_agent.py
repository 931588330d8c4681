#!/usr/bin/env python3
"""An A2A agent paid in band, as the A2A x402 extension (v0.2,
https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2/spec.md) has a merchant do
it: the official a2a-sdk server (a2a-sdk 1.3.0, JSON-RPC 1.0 and 0.3) whose executor asks for
payment in an input-required task and takes it from the next message, verifying and settling it
with the official x402 SDK's resource server (x402 2.25.0) through a facilitator over HTTP
(x402_facilitator.py). No package ships the extension's merchant side for a2a-sdk 1.x (the
reference library is written for 0.3 and x402 version 1): these few steps are its flow.

  1. A message on no task: input-required, the status message "Payment is required." with
     metadata x402.payment.status "payment-required" and x402.payment.required (the SDK's
     PaymentRequired: one `exact` offer of --price atomic units of --asset to --pay-to).
     Unless the request activated the extension (A2A-Extensions or X-A2A-Extensions naming an
     a2a-x402 URI): then the task fails, "the A2A x402 extension is not activated".
  2. A message on that task with x402.payment.status "payment-submitted" and
     x402.payment.payload: verified (the SDK's verify_payment). Refused: input-required again,
     "payment-required" with a fresh x402.payment.required whose `error` is the reason.
     Valid: working ("payment-verified"), --work seconds, then settled (settle_payment);
     settled: an artifact "result" with the first message's text upper-cased, completed,
     "payment-completed" and x402.payment.receipts [the SDK's SettleResponse]; not settled:
     failed, "payment-failed" and the receipts.
  A message on the task without a payment: asked again, as in 1.

Test helper (not A2A): GET /_jobs -> {"jobs": [{"task_id", "text", "payer", "extensions"}, ...]}:
every task that was paid for, in order, with the payer the facilitator verified and the
extensions its first message activated.

  x402_a2a_agent.py --facilitator URL --asset ADDR --pay-to ADDR --price N
                    [--network eip155:31337] [--name USDC] [--version 2] [--work SECONDS] [--port N]

Binds 127.0.0.1:0 (or --port), prints one line "PORT=<n>" once listening; exits when stdin closes,
on SIGTERM, or when its parent dies (peer_lifecycle.py).
"""

import argparse
import asyncio
import contextlib
import sys
import threading

from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from x402 import x402ResourceServer
from x402.http import FacilitatorConfig, HTTPFacilitatorClient
from x402.mechanisms.evm.exact import register_exact_evm_server
from x402.schemas import PaymentPayload, ResourceConfig, ResourceInfo

import peer_lifecycle
from a2a_x402 import EXTENSION, metadata_of


def text_of(msg):
    return "".join(p.text for p in msg.parts if p.HasField("text")) if msg is not None else ""


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class PaidExecutor(AgentExecutor):
    def __init__(self, server, args):
        self.server = server
        self.args = args
        self.texts = {}  # task id -> the first message's text
        self.activated = {}  # task id -> the extensions its first message activated
        self.jobs = []
        self.lock = threading.Lock()

    def requirements(self):
        config = ResourceConfig(
            scheme="exact",
            network=self.args.network,
            pay_to=self.args.pay_to,
            price={
                "amount": str(self.args.price),
                "asset": self.args.asset,
                "extra": {"name": self.args.name, "version": self.args.version},
            },
            max_timeout_seconds=300,
        )
        return self.server.build_payment_requirements(config)

    async def ask(self, updater, error=None):
        required = await self.server.create_payment_required_response(
            self.requirements(), resource=ResourceInfo(url="a2a://x402-test-agent/upper"), error=error
        )
        metadata = {"x402.payment.status": "payment-required", "x402.payment.required": dump(required)}
        if error:
            metadata["x402.payment.error"] = "INVALID_SIGNATURE"
        text = "Payment is required." if not error else f"Payment refused: {error}"
        await updater.requires_input(message=updater.new_agent_message([new_text_part(text)], metadata=metadata))

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg, task = context.message, context.current_task
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[msg] if msg is not None else [],
                )
            )
            extensions = sorted(context.requested_extensions)
            if not any("a2a-x402" in e for e in extensions):
                await updater.failed(
                    message=updater.new_agent_message([new_text_part("the A2A x402 extension is not activated")])
                )
                return
            self.texts[context.task_id] = text_of(msg)
            self.activated[context.task_id] = extensions
            await self.ask(updater)
            return
        metadata = metadata_of(msg)
        if metadata.get("x402.payment.status") != "payment-submitted" or "x402.payment.payload" not in metadata:
            await self.ask(updater)
            return
        payload = PaymentPayload.model_validate(metadata["x402.payment.payload"])
        requirements = self.requirements()[0]
        verified = await self.server.verify_payment(payload, requirements)
        if not verified.is_valid:
            await self.ask(updater, error=verified.verify.invalid_reason or "invalid payment")
            return
        await updater.start_work(
            message=updater.new_agent_message(
                [new_text_part("Payment verified.")], metadata={"x402.payment.status": "payment-verified"}
            )
        )
        await asyncio.sleep(self.args.work)
        settled = await self.server.settle_payment(payload, requirements)
        receipts = [dump(settled)]
        if not settled.success:
            await updater.failed(
                message=updater.new_agent_message(
                    [new_text_part("Payment failed.")],
                    metadata={"x402.payment.status": "payment-failed", "x402.payment.receipts": receipts},
                )
            )
            return
        text = self.texts.pop(context.task_id, "")
        with self.lock:
            self.jobs.append(
                {
                    "task_id": context.task_id,
                    "text": text,
                    "payer": verified.verify.payer,
                    "extensions": self.activated.pop(context.task_id, []),
                }
            )
        await updater.add_artifact([new_text_part(text.upper())], name="result", last_chunk=True)
        await updater.complete(
            message=updater.new_agent_message(
                [new_text_part("Payment completed.")],
                metadata={"x402.payment.status": "payment-completed", "x402.payment.receipts": receipts},
            )
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_app(port, args):
    server = x402ResourceServer(HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator)))
    register_exact_evm_server(server, args.network)
    # Fetches the facilitator's /supported; the SDK prints a failure to stdout, which carries
    # only the PORT= line: it goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        server.initialize()
    executor = PaidExecutor(server, args)
    url = f"http://127.0.0.1:{port}/a2a/jsonrpc"
    card = AgentCard(
        name="interlingua x402 test agent",
        description="Upper-cases the text of the user message, paid in band (A2A x402 extension).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3.0"),
        ],
        capabilities=AgentCapabilities(
            streaming=False,
            push_notifications=False,
            extensions=[AgentExtension(uri=EXTENSION, description="Paid with x402 in band.", required=True)],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="upper", name="Upper-case", description="Upper-cases the text, paid.", tags=["test"])],
    )
    handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card)

    async def jobs(_request):
        with executor.lock:
            return JSONResponse({"jobs": list(executor.jobs)})

    routes = create_agent_card_routes(card)
    routes += create_jsonrpc_routes(handler, rpc_url="/a2a/jsonrpc", enable_v0_3_compat=True)
    routes.append(Route("/_jobs", jobs, methods=["GET"]))
    return Starlette(routes=routes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facilitator", required=True, help="the facilitator's base URL")
    ap.add_argument("--asset", required=True, help="the token's address")
    ap.add_argument("--pay-to", required=True, help="the address paid")
    ap.add_argument("--price", required=True, type=int, help="atomic units per task")
    ap.add_argument("--network", default="eip155:31337")
    ap.add_argument("--name", default="USDC", help="the token's EIP-712 name")
    ap.add_argument("--version", default="2", help="the token's EIP-712 version")
    ap.add_argument("--work", type=float, default=0.3, help="seconds of work once paid")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    sock = peer_lifecycle.bind(args.port)
    app = build_app(sock.getsockname()[1], args)
    peer_lifecycle.run(sock, app, announce="PORT={port}", log_level="warning", watch_stdin_env="AGENT_WATCH_STDIN")


if __name__ == "__main__":
    main()
