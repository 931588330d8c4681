#!/usr/bin/env python3
"""MIP-003 test agent built on the real `masumi==1.2.0` package.

The app comes from masumi's own factory `masumi.create_masumi_app(...)` (the same call `masumi.run()` makes);
we serve it with uvicorn on a pre-bound 127.0.0.1:0 socket because `masumi.run()` cannot report an ephemeral
port (it calls uvicorn.run(host, port) and prints a banner to stdout).

Input schema: `text` (type text, required), `mode` (type option, values ok|input|fail, optional).
Handler:
  mode == "fail"  -> raises RuntimeError            (job ends "failed", result null)
  mode == "input" -> masumi.hitl.request_input(schema with required text field `more`) once,
                     then returns text.upper() + " " + more
  otherwise       -> returns text.upper()
(`mode` may also arrive as a one-element list, e.g. ["input"]; the first element is used.)

Prints exactly one line "PORT=<n>" on stdout once listening; stdout is then redirected to stderr.
Exits on SIGTERM/SIGINT, on stdin EOF (only if stdin is a pipe/socket), and when the parent process dies.

Environment:
  required  PAYMENT_SERVICE_URL   e.g. http://127.0.0.1:<standin port>/api/v1  (masumi's default is the public
                                  node, so we refuse to start without it)
  required  PAYMENT_API_KEY       any non-empty string (masumi Config raises ValueError if empty); sent as header `token`
  required  SELLER_VKEY           any non-empty string (MasumiAgentServer raises ValueError if missing)
  required  AGENT_IDENTIFIER      57-250 chars for a real node / strict stand-in (masumi itself would fall back to
                                  "unregistered-agent"; we refuse to start without it)
  optional  NETWORK               default "Preprod"
  optional  PEER_PAYMENT_POLL_SECONDS  float, default 10 (masumi's hard-coded default). Interval between
                                  resolve-blockchain-identifier polls. masumi has NO env var or run() parameter for it;
                                  this script patches Payment.start_status_monitoring's interval_seconds. masumi also
                                  sleeps 1 s after every poll cycle, so the effective floor is ~1 s.
  optional  AGENT_WORK_SECONDS    float, default 0: the handler sleeps this long (asyncio.sleep) before returning,
                                  so that "running" is observable.
  optional  AGENT_PORT            default 0 (ephemeral). PORT is deliberately NOT read.
  optional  AGENT_WATCH_STDIN     auto (default) | 1 | 0
  optional  PEER_WATCH_PARENT     1 (default): exit when the parent process dies (checked every 0.5 s); 0 disables.
  optional  PEER_LOG_LEVEL        default "info" for masumi loggers, "warning" for uvicorn

.env: masumi/__init__.py calls python-dotenv's load_dotenv() at import. Without a path, find_dotenv() searches
from the directory of the *calling file* (site-packages/masumi) upward, not from the cwd, so a .env in the
venv's parents (e.g. /work/helpers/peers/.env, /work/.env) would be loaded. This script sets
PYTHON_DOTENV_DISABLED=1 and replaces dotenv.load_dotenv with a no-op before importing masumi.
"""

import os
import sys

# ---- must happen before `import masumi` -------------------------------------------------------------
os.environ["PYTHON_DOTENV_DISABLED"] = "1"
import dotenv  # noqa: E402

dotenv.load_dotenv = lambda *a, **k: False
# ------------------------------------------------------------------------------------------------------

import argparse  # noqa: E402
import asyncio  # noqa: E402
import logging  # noqa: E402

import masumi  # noqa: E402
from masumi import Config, create_masumi_app  # noqa: E402
from masumi.hitl import request_input  # noqa: E402
from masumi.payment import Payment  # noqa: E402

import peer_lifecycle  # noqa: E402

INPUT_SCHEMA = {
    "input_data": [
        {
            "id": "text",
            "type": "text",
            "name": "Text",
            "data": {"placeholder": "hello world", "description": "Text to upper-case"},
        },
        {
            "id": "mode",
            "type": "option",
            "name": "Mode",
            "data": {
                "values": ["ok", "input", "fail"],
                "description": "ok: return TEXT; input: ask for `more` first; fail: raise",
            },
            "validations": [
                {"validation": "min", "value": "1"},
                {"validation": "max", "value": "1"},
                {"validation": "optional", "value": "true"},
            ],
        },
    ]
}

MORE_SCHEMA = {
    "input_data": [
        {
            "id": "more",
            "type": "text",
            "name": "More",
            "data": {"description": "Text appended to the result"},
        }
    ]
}

WORK_SECONDS = float(os.environ.get("AGENT_WORK_SECONDS", "0") or 0)


def _mode(input_data):
    m = input_data.get("mode")
    if isinstance(m, list):
        m = m[0] if m else None
    return str(m).strip().lower() if m is not None else "ok"


async def process_job(identifier_from_purchaser, input_data):
    text = str(input_data.get("text", ""))
    mode = _mode(input_data)
    if WORK_SECONDS > 0:
        await asyncio.sleep(WORK_SECONDS)
    if mode == "fail":
        raise RuntimeError("mode=fail requested")
    if mode == "input":
        provided = await request_input(MORE_SCHEMA, message="Please provide `more`")
        return text.upper() + " " + str(provided.get("more", ""))
    return text.upper()


def _patch_poll_interval():
    v = os.environ.get("PEER_PAYMENT_POLL_SECONDS")
    if not v:
        return
    interval = float(v)
    orig = Payment.start_status_monitoring

    async def start_status_monitoring(self, callback=None, interval_seconds=10):
        return await orig(self, callback=callback, interval_seconds=interval)

    Payment.start_status_monitoring = start_status_monitoring


def _set_log_levels(level_name):
    level = getattr(logging, level_name.upper(), logging.INFO)
    for name in list(logging.Logger.manager.loggerDict):
        if name == "masumi" or name.startswith("masumi."):
            lg = logging.getLogger(name)
            lg.setLevel(level)
            for h in lg.handlers:
                h.setLevel(level)


def build_app():
    missing = [
        k for k in ("PAYMENT_SERVICE_URL", "PAYMENT_API_KEY", "SELLER_VKEY", "AGENT_IDENTIFIER") if not os.environ.get(k)
    ]
    if missing:
        print(f"[masumi_agent] missing required env: {', '.join(missing)}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    _patch_poll_interval()
    config = Config(
        payment_service_url=os.environ["PAYMENT_SERVICE_URL"],
        payment_api_key=os.environ["PAYMENT_API_KEY"],
    )
    app = create_masumi_app(
        config=config,
        agent_identifier=os.environ["AGENT_IDENTIFIER"],
        network=os.environ.get("NETWORK") or "Preprod",
        start_job_handler=process_job,
        input_schema_handler=INPUT_SCHEMA,
        seller_vkey=os.environ["SELLER_VKEY"],
    )
    _set_log_levels(os.environ.get("PEER_LOG_LEVEL", "info"))
    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=int(os.environ.get("AGENT_PORT", "0") or 0))
    args = ap.parse_args()
    app = build_app()
    assert masumi.__version__ == "1.2.0", masumi.__version__
    peer_lifecycle.run(
        peer_lifecycle.bind(args.port),
        app,
        announce="PORT={port}",
        log_level="warning",
        watch_stdin_env="AGENT_WATCH_STDIN",
    )


if __name__ == "__main__":
    main()
