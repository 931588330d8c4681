#!/usr/bin/env python3
"""MCP server peer with experimental Tasks (MCP 2025-11-25), built on the official `mcp==1.30.0` package's
lowlevel `Server`, for the virtualenv of tests/peers/requirements-mcp1.txt (2.x has no Tasks).

  python mcp_server1.py [--work SECONDS] [--json-response] [--stateless] [--port N]

`server.experimental.enable_tasks()` registers tasks/get, tasks/result, tasks/list and tasks/cancel and declares
the tasks capability. Tools, both with execution.taskSupport "optional":
  slow(n: integer)   works --work seconds (default 0.4) in n steps and returns "done n". As a task
                     (`params.task` present) it runs through `ctx.experimental.run_task(work)`, one
                     `task.update_status("step i")` per step; inline it sends progress (i, n, "step i") when
                     the call carries a progressToken.
  ask(text: string)  asks the client for {"more": string} (as a task: `task.elicit`, which puts the task in
                     input_required until the client's tasks/result delivers the answer; inline:
                     `elicitation/create`); accepted: returns text.upper() + " " + more; otherwise a result
                     with isError true, "the client declined".
  fail(text: string) fails: as a task its work raises, so the task ends failed ("cannot do <text>"); inline
                     a result with isError true saying the same.

tasks/cancel is the SDK's own handler, wrapped to remember the ids it cancelled: `GET /cancelled` answers them
as a JSON array (a test's way to see that its cancel reached the server; tasks are session-scoped).

Served with `StreamableHTTPSessionManager(app=server)` inside a Starlette lifespan, mounted at /mcp. Starlette's
Mount answers /mcp with 307 -> /mcp/, so clients use http://127.0.0.1:<port>/mcp/ . Bound to
127.0.0.1 (a pre-bound port-0 socket, since nothing else reports an ephemeral port).

Prints "PORT=<n>" then "PATH=/mcp/" on stdout once listening (stdout then goes to stderr). Exits on stdin EOF
(when stdin is a pipe), on SIGTERM/SIGINT and when its parent dies (peer_lifecycle.py).
"""

import argparse
import contextlib
import warnings

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.experimental.tasks.helpers import cancel_task
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

import peer_lifecycle

# The Tasks API is experimental in 1.30.0 and warns on use; the warnings would only clutter stderr.
warnings.filterwarnings("ignore", category=DeprecationWarning)

MORE_SCHEMA = {"type": "object", "properties": {"more": {"type": "string"}}, "required": ["more"]}


def text(t, is_error=False):
    return types.CallToolResult(content=[types.TextContent(type="text", text=t)], isError=is_error)


def answered(text_in, answer):
    if answer.action == "accept" and answer.content and "more" in answer.content:
        return text(f"{text_in.upper()} {answer.content['more']}")
    return text("the client declined", is_error=True)


def build(work_seconds, cancelled):
    server = Server("peer", version="1")
    support = server.experimental.enable_tasks()
    optional = types.ToolExecution(taskSupport="optional")

    @server.experimental.cancel_task()
    async def cancel(request: types.CancelTaskRequest):
        # As the SDK's own handler does: a task of another session is not found.
        server.experimental._require_task_in_requestor_scope(request.params.taskId)
        result = await cancel_task(support.store, request.params.taskId)
        cancelled.append(request.params.taskId)
        return result

    @server.list_tools()
    async def list_tools():
        return [
            types.Tool(
                name="slow",
                description='Works in n steps, then returns "done n".',
                inputSchema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
                execution=optional,
            ),
            types.Tool(
                name="ask",
                description="Asks the client for `more`, then returns TEXT more.",
                inputSchema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                execution=optional,
            ),
            types.Tool(
                name="fail",
                description="Fails, saying it cannot do text.",
                inputSchema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                execution=optional,
            ),
        ]

    @server.call_tool()
    async def call_tool(name, arguments):
        ctx = server.request_context
        if name == "slow":
            n = int(arguments.get("n", 1))
            step = work_seconds / max(n, 1)

            async def work(task):
                for i in range(n):
                    await task.update_status(f"step {i + 1}")
                    await anyio.sleep(step)
                return text(f"done {n}")

            if ctx.experimental.is_task:
                return await ctx.experimental.run_task(work)
            token = ctx.meta.progressToken if ctx.meta else None
            for i in range(n):
                if token is not None:
                    await ctx.session.send_progress_notification(
                        progress_token=token,
                        progress=i + 1,
                        total=n,
                        message=f"step {i + 1}",
                        related_request_id=ctx.request_id,
                    )
                await anyio.sleep(step)
            return text(f"done {n}")
        if name == "ask":
            text_in = str(arguments.get("text", ""))
            message = f"more for {text_in!r}?"

            async def work(task):
                return answered(text_in, await task.elicit(message=message, requestedSchema=MORE_SCHEMA))

            if ctx.experimental.is_task:
                return await ctx.experimental.run_task(work)
            answer = await ctx.session.elicit(message, MORE_SCHEMA, related_request_id=ctx.request_id)
            return answered(text_in, answer)
        if name == "fail":
            why = f"cannot do {arguments.get('text', '')!r}"

            async def work(_task):
                raise RuntimeError(why)

            if ctx.experimental.is_task:
                return await ctx.experimental.run_task(work)
            return text(why, is_error=True)
        return text(f"Unknown tool: {name}", is_error=True)

    return server


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=float, default=0.4, help="seconds `slow` works in all (default 0.4)")
    ap.add_argument("--json-response", action="store_true", help="answer requests with JSON, not SSE")
    ap.add_argument("--stateless", action="store_true", help="no sessions (Tasks then cannot outlive a request)")
    ap.add_argument("--port", type=int, default=0, help="default 0: any free port")
    args = ap.parse_args()
    cancelled = []
    manager = StreamableHTTPSessionManager(
        app=build(args.work, cancelled), json_response=args.json_response, stateless=args.stateless
    )

    async def cancelled_ids(_request):
        return JSONResponse(cancelled)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with manager.run():
            yield

    app = Starlette(
        routes=[Route("/cancelled", cancelled_ids), Mount("/mcp", app=manager.handle_request)], lifespan=lifespan
    )
    sock = peer_lifecycle.bind(args.port)
    peer_lifecycle.run(
        sock, app, announce="PORT={port}\nPATH=/mcp/", log_level="warning", watch_stdin_env="MCP_WATCH_STDIN"
    )


if __name__ == "__main__":
    main()
