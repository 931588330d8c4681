#!/usr/bin/env python3
"""A2A server agent built on the official `a2a-sdk` package (1.3.0: A2A 1.0 with the 0.3 compat layer).

The app is a plain Starlette app made of the SDK's own routes, laid out the usual way:
  create_agent_card_routes(card)                                   GET /.well-known/agent-card.json
  create_agent_card_routes(card, card_url="/.well-known/agent.json")   (0.2.x alias, same card)
  create_jsonrpc_routes(handler, rpc_url=--rpc-path, enable_v0_3_compat=True)   POST /a2a/jsonrpc
  create_rest_routes(handler, path_prefix=--rest-path)              /a2a/rest/message:send, /tasks/{id}, ...
so the JSON-RPC endpoint answers 1.0 methods (SendMessage, GetTask, ...; client sends `A2A-Version: 1.0`)
and 0.3 methods (message/send, tasks/get, ...; no A2A-Version header, or `0.3`).
The handler is the SDK's DefaultRequestHandler with an InMemoryTaskStore.

The card lists one interface per entry of --interfaces (default "JSONRPC@1.0,JSONRPC@0.3.0,HTTP+JSON@1.0"),
each at http://127.0.0.1:<port><its path>; a binding the card does not list is not served. A 0.3 entry
makes the SDK also emit the legacy top-level fields (url, protocolVersion, preferredTransport) so 0.3
clients can read the card. capabilities.streaming = true.

Executor behaviour (input text = concatenation of the text parts of the user message, no separator):
  * enqueue the Task (TASK_STATE_SUBMITTED), sleep --work/2, TASK_STATE_WORKING, sleep --work/2, then:
  * text contains "mode:fail" (or a data part {"mode": "fail"}):
        TASK_STATE_FAILED with status message "the agent failed on purpose"
  * text contains "mode:input" (or a data part {"mode": "input"}):
        TASK_STATE_INPUT_REQUIRED with status message "Please provide more".
        A follow-up message with the same taskId: TASK_STATE_WORKING, sleep --work/2, artifact "result"
        with text  <original text>.upper() + " " + <follow-up text>, TASK_STATE_COMPLETED.
  * otherwise: artifact "result" whose single text part is the input text upper-cased, TASK_STATE_COMPLETED.
  Cancel: the executor publishes TASK_STATE_CANCELED (the SDK then stops the running execute()).

CLI:  python a2a_agent.py --port 0 [--work SECONDS] [--interfaces JSONRPC@1.0,JSONRPC@0.3.0,HTTP+JSON@1.0]
                          [--rpc-path /a2a/jsonrpc] [--rest-path /a2a/rest] [--log-level warning]
Prints exactly one line "listening <port>" on stdout (flushed) once the socket accepts connections;
stdout is then redirected to stderr. Serves until killed: exits on SIGTERM/SIGINT, on stdin EOF (only if
stdin is a pipe/socket; env AGENT_WATCH_STDIN=auto|1|0) and when the parent process dies (env
PEER_WATCH_PARENT=1|0, checked every 0.5 s).
"""

import argparse
import asyncio
import logging
import os
import sys

from contextlib import asynccontextmanager
from datetime import datetime, timezone

from starlette.applications import Starlette

from a2a.helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

import peer_lifecycle

SDK_VERSION = "1.3.0"

INPUT_PROMPT = "Please provide more"
FAIL_MESSAGE = "the agent failed on purpose"


def _now():
    ts = Timestamp()
    ts.FromDatetime(datetime.now(timezone.utc))
    return ts


def message_text(msg):
    """Concatenation of the text parts of a message (no separator)."""
    if msg is None:
        return ""
    return "".join(p.text for p in msg.parts if p.HasField("text"))


def message_mode(msg):
    """'input', 'fail' or 'ok' from the text ("mode:input") or a data part {"mode": "input"}."""
    if msg is None:
        return "ok"
    text = message_text(msg)
    modes = set()
    for p in msg.parts:
        if p.HasField("data"):
            d = MessageToDict(p.data)
            if isinstance(d, dict) and isinstance(d.get("mode"), str):
                modes.add(d["mode"].strip().lower())
    if "mode:fail" in text or "fail" in modes:
        return "fail"
    if "mode:input" in text or "input" in modes:
        return "input"
    return "ok"


class UpperExecutor(AgentExecutor):
    def __init__(self, work_seconds):
        self.phase = max(0.0, work_seconds) / 2.0
        # task id -> original input text, for the follow-up after input-required
        self.originals = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        task = context.current_task
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)

        if task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            original = self.originals.get(task.id)
            if original is None:  # e.g. after a restart of the executor object: first user message in history
                firsts = [m for m in task.history if m.role == Role.ROLE_USER]
                original = message_text(firsts[0]) if firsts else ""
            await updater.start_work()
            await asyncio.sleep(self.phase)
            await updater.add_artifact(
                [new_text_part(original.upper() + " " + message_text(msg))], name="result", last_chunk=True
            )
            await updater.complete()
            self.originals.pop(task.id, None)
            return

        if task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED, timestamp=_now()),
                    history=[msg] if msg is not None else [],
                )
            )
        text = message_text(msg)
        mode = message_mode(msg)
        await asyncio.sleep(self.phase)
        await updater.start_work()
        await asyncio.sleep(self.phase)

        if mode == "fail":
            await updater.failed(message=updater.new_agent_message([new_text_part(FAIL_MESSAGE)]))
        elif mode == "input":
            self.originals[context.task_id] = text
            await updater.requires_input(message=updater.new_agent_message([new_text_part(INPUT_PROMPT)]))
        else:
            await updater.add_artifact([new_text_part(text.upper())], name="result", last_chunk=True)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.originals.pop(context.task_id, None)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def build_card(port, interfaces, paths):
    return AgentCard(
        name="interlingua test upper-caser",
        description="Upper-cases the text of the user message (test peer built on a2a-sdk).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{port}{paths[b]}", protocol_binding=b, protocol_version=v)
            for b, v in interfaces
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="upper",
                name="Upper-case",
                description="Returns the input text upper-cased; 'mode:input' asks for more, 'mode:fail' fails.",
                tags=["test"],
                examples=["hello world", "hello mode:input", "hello mode:fail"],
            )
        ],
    )


def build_app(port, work_seconds, interfaces, paths):
    card = build_card(port, interfaces, paths)
    handler = DefaultRequestHandler(
        agent_executor=UpperExecutor(work_seconds),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    routes = []
    routes += create_agent_card_routes(card)
    routes += create_agent_card_routes(card, card_url="/.well-known/agent.json")
    bindings = {b for b, _ in interfaces}
    if "JSONRPC" in bindings:
        routes += create_jsonrpc_routes(handler, rpc_url=paths["JSONRPC"], enable_v0_3_compat=True)
    if "HTTP+JSON" in bindings:
        routes += create_rest_routes(handler, path_prefix=paths["HTTP+JSON"])

    @asynccontextmanager
    async def lifespan(app):
        yield
        try:
            await asyncio.wait_for(handler.aclose(), 2)
        except Exception:  # noqa: BLE001
            pass

    return Starlette(routes=routes, lifespan=lifespan)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    ap.add_argument("--work", type=float, default=0.6, help="seconds of work per execution (two phases of half)")
    ap.add_argument(
        "--interfaces",
        default="JSONRPC@1.0,JSONRPC@0.3.0,HTTP+JSON@1.0",
        help="comma list of BINDING@VERSION the card lists (and the app serves)",
    )
    ap.add_argument("--rpc-path", default="/a2a/jsonrpc", help="where JSON-RPC is served")
    ap.add_argument("--rest-path", default="/a2a/rest", help="the prefix HTTP+JSON is served under")
    ap.add_argument("--log-level", default=os.environ.get("PEER_LOG_LEVEL", "warning"))
    args = ap.parse_args()

    import importlib.metadata

    installed = importlib.metadata.version("a2a-sdk")
    if installed != SDK_VERSION:
        print(f"[a2a_agent] warning: a2a-sdk {installed} installed, written for {SDK_VERSION}", file=sys.stderr)

    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING), stream=sys.stderr)
    interfaces = [tuple(i.strip().split("@", 1)) for i in args.interfaces.split(",") if i.strip()]
    paths = {"JSONRPC": args.rpc_path, "HTTP+JSON": args.rest_path}
    sock = peer_lifecycle.bind(args.port)
    app = build_app(sock.getsockname()[1], args.work, interfaces, paths)
    peer_lifecycle.run(
        sock,
        app,
        announce="listening {port}",
        log_level=args.log_level.lower(),
        watch_stdin_env="AGENT_WATCH_STDIN",
    )


if __name__ == "__main__":
    main()
