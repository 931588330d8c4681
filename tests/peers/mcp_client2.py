#!/usr/bin/env python3
"""MCP client driver built on the official `mcp==2.3.0` package (`mcp.Client`), for the virtualenv of
tests/peers/requirements-mcp2.txt.

  python mcp_client2.py --url http://127.0.0.1:PORT/mcp [--token T] [--mode legacy|auto|2026-07-28]
                        [--call NAME [--args JSON]] [--elicit JSON | --decline | --dismiss] [--timeout S]

Connects (Streamable HTTP) in the given --mode (default legacy: the initialize handshake; auto: the SDK's
default, `server/discover` first and initialize on any error; 2026-07-28: adopts that version with nothing
sent up front), lists the tools, and calls --call with --args if given, with a progress callback (so the SDK
puts a progressToken in `_meta`).

--token T   "Authorization: Bearer T" on every request: a default header of the httpx2.AsyncClient handed
            to streamable_http_client (which takes no headers of its own).
--elicit J  an elicitation callback that records each request and answers `accept` with the JSON object J
            as content. Without it (and without --decline or --dismiss) the client has NO callback, so it declares no
            elicitation capability.
--decline   an elicitation callback that records each request and answers `decline`.
--dismiss   an elicitation callback that records each request and answers `cancel` (the form dismissed).
--timeout S the whole run, connection included (default 60); the script never hangs past it.

Output: ONE JSON object on stdout:
  {"protocol_version": "2025-11-25", "server_name": "peer",
   "tools": [{"name", "title", "description", "inputSchema", "outputSchema"?, "execution"?}],
   "result": {"content": [...], "structuredContent": ..., "isError": false} | null,
   "progress": [{"progress", "total", "message"}], "elicitations": [{"message", "requestedSchema"}],
   "error": null | {"type": "<exception class>", "code": <JSON-RPC code> | null, "message": "..."}}
What was seen before an error stays in the object. Exit 0, also on an error (it is in the JSON); non-zero
only if the script itself is broken.
"""

import json

import anyio
import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

import mcp_observe


async def run(args, obs):
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    arguments = json.loads(args.args)

    async def on_elicit(_context, params):
        action, content = obs.elicited(params)
        return types.ElicitResult(action=action, content=content)

    with anyio.fail_after(args.timeout):
        async with httpx2.AsyncClient(headers=headers) as http:
            client = Client(
                streamable_http_client(args.url, http_client=http),
                mode=args.mode,
                elicitation_callback=on_elicit if obs.wants_elicitation() else None,
            )
            async with client:
                obs.out["protocol_version"] = client.protocol_version
                info = client.server_info
                obs.out["server_name"] = info.name if info is not None else None
                listed = await client.list_tools()
                obs.out["tools"] = [mcp_observe.tool(t) for t in listed.tools]
                if args.call:
                    result = await client.call_tool(args.call, arguments, progress_callback=obs.progress)
                    obs.out["result"] = mcp_observe.call_result(result)


def main():
    ap = mcp_observe.parser(__doc__)
    ap.add_argument("--mode", choices=["legacy", "auto", "2026-07-28"], default="legacy")
    args = ap.parse_args()
    obs = mcp_observe.Observer(args, {})
    failure = None
    try:
        anyio.run(run, args, obs)
    except Exception as e:  # noqa: BLE001 - every failure is reported in the JSON
        failure = e
    obs.finish(failure)


if __name__ == "__main__":
    main()
