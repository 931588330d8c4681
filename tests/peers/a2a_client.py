#!/usr/bin/env python3
"""A2A client driver built on the official `a2a-sdk` package (1.3.0).

Fetches the Agent Card from <url>/.well-known/agent-card.json with the SDK's A2ACardResolver, builds a
client with ClientFactory (JSON-RPC transport) and runs one scenario against the agent.

  python a2a_client.py --url http://127.0.0.1:PORT/prefix --scenario NAME
                       [--token TOKEN] [--text TEXT] [--version 1.0|0.3] [--rpc-url URL] [--timeout S]

The JSON-RPC calls go to the URL of the card's JSONRPC interface (that is how the SDK works), unless
--rpc-url overrides it.

--binding  JSONRPC (default) or HTTP+JSON: the only binding the client supports (ClientConfig's
           supported_protocol_bindings), so ClientFactory picks the card's interface of that binding.
--token T  sends "Authorization: Bearer T" on every request (the card GET and every JSON-RPC call); it is set
           as a default header of the httpx client handed to the SDK.
--version  1.0 (default): the SDK picks the card's protocolVersion 1.0 interface and uses its 1.0 transport
           (PascalCase methods, header "A2A-Version: 1.0").
           0.3: every JSONRPC interface of the card is relabelled protocolVersion "0.3" before the client is
           built, so the SDK's ClientFactory picks its own 0.3 compat transport (CompatJsonRpcTransport:
           message/send, tasks/get, ... with header "a2a-version: 0.3"). The SDK has no other switch for it.

Scenarios (default texts in brackets):
  complete      send --text ["hello world"] with returnImmediately (ClientConfig.polling=True), then poll
                GetTask until a terminal state.
  input         send --text ["hello"] + " mode:input" (unless it already has it) with returnImmediately, poll
                until TASK_STATE_INPUT_REQUIRED, send a follow-up "more please" with the taskId and contextId
                (returnImmediately), poll until terminal.
  fail          like complete with --text ["hello"] + " mode:fail".
  stream        SendStreamingMessage with --text ["hello world"]; every event's state in order until the
                stream ends.
  stream_input  stream "hello mode:input" until it ends (input-required), then stream the follow-up
                "more please" until it ends.
  cancel        send --text ["hello world"] with returnImmediately, poll until TASK_STATE_WORKING, CancelTask,
                then poll GetTask until terminal.
  blocking      one blocking SendMessage (no returnImmediately, no polling).
  blocking_input  a blocking SendMessage of "hello mode:input" (answered input-required), then a blocking
                follow-up "more please" with the taskId and contextId: no polling at all, each answer is
                the task as the blocking send left it.
  unknown_task  GetTask for the id "no-such-task" (expects an error).

Output: ONE JSON object on stdout, e.g.
  {"scenario": "complete", "version": "1.0", "task_id": "...", "context_id": "...",
   "states": ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
   "final_state": "TASK_STATE_COMPLETED", "artifact_text": "HELLO WORLD", "status_messages": [],
   "events": [...], "error": null}
"states" lists every task state observed, in order, with consecutive repeats collapsed (states from the
send response, each poll and each stream event). "events" (stream scenarios) lists every stream event as
{"kind": "task"|"statusUpdate"|"artifactUpdate"|"message", "state"?: ..., "text"?: ...}.
"artifact_text" is the text of the artifacts of the final task (parts joined with ""), or, for streams, of
the artifact updates. "status_messages" are the texts of the status messages seen (in order, deduplicated).
Exit 0; on an exception print {"error": "<ExceptionType>: <message>", ...partial observations} and exit 1.
"""

import argparse
import asyncio
import json
import sys
import time
import uuid

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
INTERRUPTED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
POLL_INTERVAL = 0.1
FOLLOW_UP = "more please"


def state_name(state):
    return TaskState.Name(state)


def text_of(parts):
    return "".join(p.text for p in parts if p.HasField("text"))


class Observer:
    def __init__(self, scenario, version):
        self.out = {
            "scenario": scenario,
            "version": version,
            "task_id": None,
            "context_id": None,
            "states": [],
            "final_state": None,
            "artifact_text": None,
            "status_messages": [],
            "events": [],
            "error": None,
        }
        self._stream_artifacts = []

    def state(self, state):
        name = state_name(state)
        if not self.out["states"] or self.out["states"][-1] != name:
            self.out["states"].append(name)
        self.out["final_state"] = name

    def status_message(self, status):
        if status.HasField("message"):
            t = text_of(status.message.parts)
            if t and t not in self.out["status_messages"]:
                self.out["status_messages"].append(t)

    def task(self, task):
        self.out["task_id"] = task.id or self.out["task_id"]
        self.out["context_id"] = task.context_id or self.out["context_id"]
        self.state(task.status.state)
        self.status_message(task.status)
        if task.artifacts:
            self.out["artifact_text"] = "".join(text_of(a.parts) for a in task.artifacts)

    def stream_event(self, ev):
        kind = ev.WhichOneof("payload")
        rec = {"kind": {"status_update": "statusUpdate", "artifact_update": "artifactUpdate"}.get(kind, kind)}
        if kind == "task":
            self.task(ev.task)
            rec["state"] = state_name(ev.task.status.state)
        elif kind == "status_update":
            su = ev.status_update
            self.out["task_id"] = su.task_id or self.out["task_id"]
            self.out["context_id"] = su.context_id or self.out["context_id"]
            self.state(su.status.state)
            self.status_message(su.status)
            rec["state"] = state_name(su.status.state)
        elif kind == "artifact_update":
            au = ev.artifact_update
            t = text_of(au.artifact.parts)
            self._stream_artifacts.append(t)
            self.out["artifact_text"] = "".join(self._stream_artifacts)
            rec["text"] = t
            rec["name"] = au.artifact.name
        elif kind == "message":
            rec["text"] = text_of(ev.message.parts)
        self.out["events"].append(rec)

    def current_state(self):
        return self.out["final_state"]


def user_message(text, task_id=None, context_id=None):
    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        msg.task_id = task_id
    if context_id:
        msg.context_id = context_id
    return msg


async def send(client, obs, msg, return_immediately):
    req = SendMessageRequest(message=msg)
    if return_immediately:
        req.configuration.return_immediately = True
    async for ev in client.send_message(req):
        obs.stream_event(ev)
    return obs.out["task_id"]


async def poll(client, obs, task_id, until, deadline):
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        obs.task(task)
        if task.status.state in until:
            return task
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task_id} still {state_name(task.status.state)}")
        await asyncio.sleep(POLL_INTERVAL)


def with_mode(text, mode):
    return text if f"mode:{mode}" in text else f"{text} mode:{mode}"


async def run(args, obs):
    headers = {}
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    streaming = args.scenario in ("stream", "stream_input")
    async with httpx.AsyncClient(headers=headers, timeout=args.timeout) as http:
        # ClientFactory adds "A2A-Version: 1.0" to the shared httpx client's default headers (the 0.3
        # transport overrides it per request); it is made first so that the card GET carries it too, as
        # with the SDK's own ClientFactory.create_from_url.
        factory = ClientFactory(
            ClientConfig(
                httpx_client=http,
                streaming=streaming,
                polling=False,
                supported_protocol_bindings=[args.binding],
            )
        )
        card = await A2ACardResolver(http, args.url).get_agent_card()
        for iface in card.supported_interfaces:
            if args.rpc_url:
                iface.url = args.rpc_url
            if args.version == "0.3" and iface.protocol_binding == "JSONRPC":
                iface.protocol_version = "0.3"
        obs.out["card_interfaces"] = [
            {"url": i.url, "protocolBinding": i.protocol_binding, "protocolVersion": i.protocol_version}
            for i in card.supported_interfaces
        ]
        client = factory.create(card)
        obs.out["transport"] = type(client._transport).__name__  # noqa: SLF001
        deadline = time.monotonic() + args.timeout
        sc = args.scenario
        if sc in ("complete", "fail"):
            text = args.text or ("hello world" if sc == "complete" else "hello")
            if sc == "fail":
                text = with_mode(text, "fail")
            task_id = await send(client, obs, user_message(text), True)
            await poll(client, obs, task_id, TERMINAL, deadline)
        elif sc == "blocking":
            await send(client, obs, user_message(args.text or "hello world"), False)
        elif sc == "blocking_input":
            text = with_mode(args.text or "hello", "input")
            await send(client, obs, user_message(text), False)
            if obs.current_state() == "TASK_STATE_INPUT_REQUIRED":
                obs.out["events"].append({"kind": "follow-up"})
                await send(client, obs, user_message(FOLLOW_UP, obs.out["task_id"], obs.out["context_id"]), False)
        elif sc == "input":
            text = with_mode(args.text or "hello", "input")
            task_id = await send(client, obs, user_message(text), True)
            await poll(client, obs, task_id, TERMINAL | INTERRUPTED, deadline)
            if obs.current_state() == "TASK_STATE_INPUT_REQUIRED":
                await send(client, obs, user_message(FOLLOW_UP, task_id, obs.out["context_id"]), True)
                await poll(client, obs, task_id, TERMINAL, deadline)
        elif sc == "stream":
            await send(client, obs, user_message(args.text or "hello world"), False)
        elif sc == "stream_input":
            text = with_mode(args.text or "hello", "input")
            await send(client, obs, user_message(text), False)
            if obs.current_state() == "TASK_STATE_INPUT_REQUIRED":
                obs.out["events"].append({"kind": "follow-up"})
                await send(client, obs, user_message(FOLLOW_UP, obs.out["task_id"], obs.out["context_id"]), False)
        elif sc == "cancel":
            task_id = await send(client, obs, user_message(args.text or "hello world"), True)
            await poll(client, obs, task_id, {TaskState.TASK_STATE_WORKING} | TERMINAL | INTERRUPTED, deadline)
            task = await client.cancel_task(CancelTaskRequest(id=task_id))
            obs.task(task)
            await poll(client, obs, task_id, TERMINAL, deadline)
        elif sc == "unknown_task":
            await poll(client, obs, "no-such-task", TERMINAL | INTERRUPTED, deadline)
        else:
            raise ValueError(f"unknown scenario {sc}")
        await client.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="base URL; the card is read from <url>/.well-known/agent-card.json")
    ap.add_argument(
        "--scenario",
        required=True,
        choices=[
            "complete", "input", "fail", "stream", "stream_input", "cancel", "blocking", "blocking_input",
            "unknown_task",
        ],
    )
    ap.add_argument("--token")
    ap.add_argument("--text")
    ap.add_argument("--version", choices=["1.0", "0.3"], default="1.0")
    ap.add_argument("--binding", choices=["JSONRPC", "HTTP+JSON"], default="JSONRPC")
    ap.add_argument("--rpc-url", help="use this JSON-RPC URL instead of the one in the card")
    ap.add_argument("--timeout", type=float, default=30.0, help="overall and per-request timeout in seconds")
    args = ap.parse_args()

    obs = Observer(args.scenario, args.version)
    code = 0
    try:
        asyncio.run(run(args, obs))
    except Exception as e:  # noqa: BLE001
        obs.out["error"] = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"
        code = 1
    sys.stdout.write(json.dumps(obs.out) + "\n")
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
