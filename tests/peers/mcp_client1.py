#!/usr/bin/env python3
"""MCP client driver built on the official `mcp==1.30.0` package (`ClientSession`, with its experimental Tasks
API), for the virtualenv of tests/peers/requirements-mcp1.txt. Initialize-era only (it offers 2025-11-25).

  python mcp_client1.py --url http://127.0.0.1:PORT/mcp [--token T] [--mode legacy]
                        [--call NAME [--args JSON] [--task [--cancel] [--await-status S]]] [--list-tasks]
                        [--elicit JSON | --decline | --dismiss] [--timeout S]

Connects with the non-deprecated `streamable_http_client(url, http_client=httpx.AsyncClient(headers=…))`,
initializes, lists the tools, and calls --call with --args if given:
  plain      `session.call_tool(name, args, progress_callback=…)` (so the SDK sends a progressToken).
  --task     `session.experimental.call_tool_as_task(name, args, ttl=60000)`, then `poll_task` (every
             pollInterval the server gives, 500 ms by default). 1.30.0's poll_task does not stop at
             input_required, so on a polled `input_required` the script calls `get_task_result(task_id,
             CallToolResult)` itself: it blocks while the server's queued elicitation reaches the callback,
             and returns the result; then one `get_task` records the status that follows. At a terminal
             status it calls `get_task_result` for the result.
  --cancel   (with --task) right after creating the task: `cancel_task` (its status goes to
             "cancelled_status"), then `cancel_task` again (its error goes to "second_cancel_error"), then
             one `get_task`. No result is fetched.
--await-status S  (with --task) after the result, wait up to S seconds for a `notifications/tasks/status`
            saying the task ended, as the SDK delivers server notifications from any stream (the session's GET
            stream among them) to the session's `message_handler`. Every such notification received, for any
            task, is in "status_notes" as {"taskId", "status"}, with or without this flag.
--list-tasks after everything, `list_tasks()`: the task ids in "listed".
--token T   "Authorization: Bearer T" on every request (a default header of the httpx.AsyncClient).
--elicit J  an elicitation callback that records each request and answers `accept` with the JSON object J
            as content. Without it (and without --decline or --dismiss) there is NO callback, so the client declares no
            elicitation capability.
--decline   an elicitation callback that records each request and answers `decline`.
--dismiss   an elicitation callback that records each request and answers `cancel` (the form dismissed).
--mode      only "legacy" (accepted so that both clients take the same arguments).
--timeout S the whole run, connection included (default 60); the script never hangs past it.

Output: ONE JSON object on stdout, mcp_client2.py's keys plus the task's:
  {"protocol_version": "2025-11-25", "server_name": "peer",
   "tools": [{"name", "title", "description", "inputSchema", "outputSchema"?, "execution"?}],
   "result": {"content": [...], "structuredContent": ..., "isError": false} | null,
   "progress": [{"progress", "total", "message"}], "elicitations": [{"message", "requestedSchema"}],
   "task_id": "..." | null, "statuses": ["working", "input_required", "working", "completed"],
   "cancelled_status": "cancelled" | null, "second_cancel_error": {error} | null, "listed": [ids] | null,
   "status_notes": [{"taskId", "status"}],
   "error": null | {"type": "<exception class>", "code": <JSON-RPC code> | null, "message": "..."}}
"statuses" holds every task status seen (the CreateTaskResult's, each poll's, the last get_task's), in
order, consecutive repeats collapsed. What was seen before an error stays in the object. Exit 0, also on an
error (it is in the JSON); non-zero only if the script itself is broken.
"""

import json
import warnings

import anyio
import httpx
import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import mcp_observe

# The Tasks API is experimental in 1.30.0 and warns on use; the warnings would only clutter stderr.
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=UserWarning)

TERMINAL = {"completed", "failed", "cancelled"}


def status(obs, s):
    statuses = obs.out["statuses"]
    if not statuses or statuses[-1] != s:
        statuses.append(s)


async def run_task(session, args, obs, arguments):
    tasks = session.experimental
    made = await tasks.call_tool_as_task(args.call, arguments, ttl=60000)
    task_id = made.task.taskId
    obs.out["task_id"] = task_id
    status(obs, made.task.status)
    if args.cancel:
        cancelled = await tasks.cancel_task(task_id)
        obs.out["cancelled_status"] = cancelled.status
        try:
            await tasks.cancel_task(task_id)
        except Exception as e:  # noqa: BLE001 - the expected outcome, reported
            obs.out["second_cancel_error"] = mcp_observe.error(e)
        status(obs, (await tasks.get_task(task_id)).status)
        return
    polled = tasks.poll_task(task_id)
    try:
        async for st in polled:
            status(obs, st.status)
            if st.status == "input_required":
                result = await tasks.get_task_result(task_id, types.CallToolResult)
                obs.out["result"] = mcp_observe.call_result(result)
                status(obs, (await tasks.get_task(task_id)).status)
                return
            if st.status in TERMINAL:
                break
    finally:
        await polled.aclose()
    result = await tasks.get_task_result(task_id, types.CallToolResult)
    obs.out["result"] = mcp_observe.call_result(result)


async def await_status(obs, seconds):
    """Waits (at most `seconds`) until a status notification says the task ended."""
    with anyio.move_on_after(seconds):
        while not any(
            n["taskId"] == obs.out["task_id"] and n["status"] in TERMINAL for n in obs.out["status_notes"]
        ):
            await anyio.sleep(0.05)


async def run(args, obs):
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    arguments = json.loads(args.args)

    async def on_elicit(_context, params):
        action, content = obs.elicited(params)
        return types.ElicitResult(action=action, content=content)

    async def on_message(message):
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.TaskStatusNotification):
            obs.out["status_notes"].append({"taskId": message.root.params.taskId, "status": message.root.params.status})

    with anyio.fail_after(args.timeout):
        async with httpx.AsyncClient(headers=headers) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write, _session_id):
                session = ClientSession(
                    read,
                    write,
                    elicitation_callback=on_elicit if obs.wants_elicitation() else None,
                    message_handler=on_message,
                )
                async with session:
                    init = await session.initialize()
                    obs.out["protocol_version"] = init.protocolVersion
                    obs.out["server_name"] = init.serverInfo.name
                    listed = await session.list_tools()
                    obs.out["tools"] = [mcp_observe.tool(t) for t in listed.tools]
                    if args.call and args.task:
                        await run_task(session, args, obs, arguments)
                        if args.await_status:
                            await await_status(obs, args.await_status)
                    elif args.call:
                        result = await session.call_tool(args.call, arguments, progress_callback=obs.progress)
                        obs.out["result"] = mcp_observe.call_result(result)
                    if args.list_tasks:
                        tasks = await session.experimental.list_tasks()
                        obs.out["listed"] = [t.taskId for t in tasks.tasks]


def main():
    ap = mcp_observe.parser(__doc__)
    ap.add_argument("--mode", choices=["legacy"], default="legacy")
    ap.add_argument("--task", action="store_true", help="call the tool as a task and poll it")
    ap.add_argument("--cancel", action="store_true", help="with --task: cancel the task, twice")
    ap.add_argument("--list-tasks", action="store_true", help="list the tasks at the end")
    ap.add_argument("--await-status", type=float, default=0, help="with --task: wait for its ending notification")
    args = ap.parse_args()
    obs = mcp_observe.Observer(
        args,
        {
            "task_id": None,
            "statuses": [],
            "cancelled_status": None,
            "second_cancel_error": None,
            "listed": None,
            "status_notes": [],
        },
    )
    failure = None
    try:
        anyio.run(run, args, obs)
    except Exception as e:  # noqa: BLE001 - every failure is reported in the JSON
        failure = e
    obs.finish(failure)


if __name__ == "__main__":
    main()
