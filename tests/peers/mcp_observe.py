"""What the MCP client peers (mcp_client2.py on mcp 2.3.0, mcp_client1.py on mcp 1.30.0) share: their
common command-line arguments, the record of what they saw, and the one JSON object they print.

Both SDK lines model the wire types with pydantic (camelCase aliases), so one set of helpers dumps
either line's objects. The module imports nothing from `mcp`, so it works in both virtualenvs; the
clients import it by name (Python puts the script's own directory first on sys.path).
"""

import argparse
import json
import sys


def parser(doc):
    """The arguments both clients take; each adds its own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp")
    ap.add_argument("--token", help='sent as "Authorization: Bearer TOKEN" on every request')
    ap.add_argument("--call", help="the tool to call after listing the tools (none: list only)")
    ap.add_argument("--args", default="{}", help="the call's arguments, a JSON object (default {})")
    ap.add_argument(
        "--elicit",
        help="answer elicitation requests with action accept and this JSON object as content "
        "(absent, and no --decline: no elicitation callback, so no elicitation capability)",
    )
    ap.add_argument("--decline", action="store_true", help="answer elicitation requests with action decline")
    ap.add_argument(
        "--dismiss", action="store_true", help="answer elicitation requests with action cancel (the form dismissed)"
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="overall limit in seconds (default 60)")
    return ap


def dump(model):
    """A pydantic model of either SDK line as its wire JSON."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def tool(t):
    """A listed tool: name, title, description, inputSchema, and outputSchema / execution when it has them."""
    wire = dump(t)
    out = {k: wire.get(k) for k in ("name", "title", "description", "inputSchema")}
    for k in ("outputSchema", "execution"):
        if k in wire:
            out[k] = wire[k]
    return out


def call_result(r):
    """A CallToolResult: content blocks, structuredContent (null if none), isError."""
    wire = dump(r)
    return {
        "content": wire.get("content", []),
        "structuredContent": wire.get("structuredContent"),
        "isError": bool(wire.get("isError", False)),
    }


def leaf(e):
    """The first exception that is not a group: anyio's task groups wrap what failed inside them."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def error(e):
    """{"type", "code", "message"}: `code` is the JSON-RPC error code (MCPError / McpError), else null."""
    e = leaf(e)
    code = None
    data = getattr(e, "error", None)
    if data is not None and isinstance(getattr(data, "code", None), int):
        code = data.code
    elif isinstance(getattr(e, "code", None), int):
        code = e.code
    message = getattr(data, "message", None) if data is not None else None
    if not isinstance(message, str):
        message = str(e) or repr(e)
    if isinstance(e, TimeoutError) and not str(e):
        message = "the overall --timeout passed"
    return {"type": type(e).__name__, "code": code, "message": message}


class Observer:
    """What the client saw, printed as one JSON object by `finish`."""

    def __init__(self, args, extra):
        self.args = args
        self.out = {
            "protocol_version": None,
            "server_name": None,
            "tools": [],
            "result": None,
            "progress": [],
            "elicitations": [],
            "error": None,
        }
        self.out.update(extra)
        self.answer = json.loads(args.elicit) if args.elicit is not None else None

    def wants_elicitation(self):
        return self.args.elicit is not None or self.args.decline or self.args.dismiss

    async def progress(self, progress, total, message):
        self.out["progress"].append({"progress": progress, "total": total, "message": message})

    def elicited(self, params):
        """Records one elicitation request; returns (action, content) to answer it with."""
        wire = dump(params)
        self.out["elicitations"].append(
            {"message": wire.get("message"), "requestedSchema": wire.get("requestedSchema")}
        )
        if self.args.decline:
            return "decline", None
        if self.args.dismiss:
            return "cancel", None
        return "accept", self.answer

    def finish(self, exc):
        if exc is not None:
            self.out["error"] = error(exc)
        sys.stdout.write(json.dumps(self.out) + "\n")
        sys.stdout.flush()
