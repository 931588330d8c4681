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
import socket  # noqa: E402
import stat  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import uvicorn  # noqa: E402

import masumi  # noqa: E402
from masumi import Config, create_masumi_app  # noqa: E402
from masumi.hitl import request_input  # noqa: E402
from masumi.payment import Payment  # noqa: E402

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


# ---------------------------------------------------------------- process plumbing (same in both peers)


def _bind(port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _stdin_should_be_watched(mode):
    if mode in ("0", "no", "false", "never"):
        return False
    if mode in ("1", "yes", "true", "always"):
        return True
    try:
        st = os.fstat(0)
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)


async def serve_app(asgi_app, port, log_level, watch_stdin_mode):
    sock = _bind(port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        asgi_app,
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=2,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    loop = asyncio.get_running_loop()

    def request_exit(reason):
        def _do():
            if not server.should_exit:
                print(f"[peer] exiting: {reason}", file=sys.stderr, flush=True)
            server.should_exit = True

        loop.call_soon_threadsafe(_do)
        # hard stop if graceful shutdown hangs
        t = threading.Timer(5.0, lambda: os._exit(0))
        t.daemon = True
        t.start()

    if _stdin_should_be_watched(watch_stdin_mode):

        def watch_stdin():
            try:
                while os.read(0, 4096):
                    pass
            except OSError:
                pass
            request_exit("stdin closed")

        threading.Thread(target=watch_stdin, daemon=True).start()

    parent = os.getppid()

    def watch_parent():
        if os.environ.get("PEER_WATCH_PARENT", "1").strip().lower() in ("0", "no", "false", "never"):
            return
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                request_exit("parent process died")
                return

    threading.Thread(target=watch_parent, daemon=True).start()

    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task
            raise SystemExit(1)
        await asyncio.sleep(0.01)
    sys.stdout.write(f"PORT={bound}\n")
    sys.stdout.flush()
    # stdout carries exactly one line; anything printed later goes to stderr
    os.dup2(2, 1)
    await task


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=int(os.environ.get("AGENT_PORT", "0") or 0))
    args = ap.parse_args()
    app = build_app()
    assert masumi.__version__ == "1.2.0", masumi.__version__
    asyncio.run(
        serve_app(
            app,
            args.port,
            "warning",
            os.environ.get("AGENT_WATCH_STDIN", "auto").strip().lower(),
        )
    )


if __name__ == "__main__":
    main()
