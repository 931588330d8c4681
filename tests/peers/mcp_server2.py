#!/usr/bin/env python3
"""MCP server peer built on the official `mcp==2.3.0` package (`MCPServer`; FastMCP does not exist in 2.x), for
the virtualenv of tests/peers/requirements-mcp2.txt.

  python mcp_server2.py [--work SECONDS] [--json-response] [--stateless] [--port N]

Tools:
  slow(n: int) -> str   reports progress n times (ctx.report_progress(i+1, n, "step i+1")), spreading --work
                        seconds (default 0.4) over them, then returns "done n"
  fail() -> str         raises ToolError("the tool failed on purpose"): a result with isError true
  echo(text: str) -> str  returns text
  ask(text: str) -> str   asks the client for {"more": string} (era-portable elicitation: Resolve + Elicit, so
                        `elicitation/create` mid-call on the initialize-era leg, InputRequiredResult on
                        2026-07-28); accepted: returns text.upper() + " " + more; declined or cancelled: a
                        tool error "the client declined"; a client without the elicitation capability: the
                        SDK's error
(A `str` return gives the tool an outputSchema {"result": string} and its results a structuredContent.)

Served by `srv.streamable_http_app(streamable_http_path="/mcp", json_response=…, stateless_http=…)` under
uvicorn on a pre-bound 127.0.0.1:0 socket (`MCPServer.run()` cannot report an ephemeral port). One app serves
both eras (2026-07-28, and initialize-era 2024-11-05 … 2025-11-25); --json-response and --stateless change the
initialize-era leg only. Clients use http://127.0.0.1:<port>/mcp; the SDK's DNS-rebinding protection wants a
Host of 127.0.0.1:* or localhost:*.

Prints exactly one line "PORT=<n>" on stdout once listening (stdout then goes to stderr). Exits on stdin EOF
(when stdin is a pipe), on SIGTERM/SIGINT and when its parent dies (peer_lifecycle.py).
"""

import argparse
from typing import Annotated

import anyio
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

import peer_lifecycle


class More(BaseModel):
    more: str


def ask_more(text: str):
    return Elicit(f"more for {text!r}?", More)


def build(work):
    srv = MCPServer("peer", version="1", log_level="WARNING")

    @srv.tool()
    async def slow(n: int, ctx: Context) -> str:
        """Reports progress n times, then returns "done n"."""
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
            await anyio.sleep(work / max(n, 1))
        return f"done {n}"

    @srv.tool()
    async def fail() -> str:
        """Always fails (a tool error: isError true)."""
        raise ToolError("the tool failed on purpose")

    @srv.tool()
    async def echo(text: str) -> str:
        """Returns its text."""
        return text

    @srv.tool()
    async def ask(text: str, answer: Annotated[ElicitationResult[More], Resolve(ask_more)]) -> str:
        """Asks the client for `more`, then returns TEXT more."""
        if not isinstance(answer, AcceptedElicitation):
            raise ToolError("the client declined")
        return f"{text.upper()} {answer.data.more}"

    return srv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=float, default=0.4, help="seconds `slow` works in all (default 0.4)")
    ap.add_argument("--json-response", action="store_true", help="answer initialize-era requests with JSON, not SSE")
    ap.add_argument("--stateless", action="store_true", help="no sessions on the initialize-era leg")
    ap.add_argument("--port", type=int, default=0, help="default 0: any free port")
    args = ap.parse_args()
    app = build(args.work).streamable_http_app(
        streamable_http_path="/mcp", json_response=args.json_response, stateless_http=args.stateless
    )
    sock = peer_lifecycle.bind(args.port)
    peer_lifecycle.run(sock, app, announce="PORT={port}", log_level="warning", watch_stdin_env="MCP_WATCH_STDIN")


if __name__ == "__main__":
    main()
