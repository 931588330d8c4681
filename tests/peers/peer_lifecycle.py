"""Process plumbing shared by the Python peers (masumi_agent.py, payment_standin.py, a2a_agent.py).

A peer binds 127.0.0.1 (port 0: any free port), serves its ASGI app there with uvicorn, prints exactly
one line naming the port on stdout once the socket accepts connections, and then points stdout at
stderr, so that the test reading stdout sees nothing else. It exits on SIGTERM/SIGINT (uvicorn's own
handlers), on stdin EOF (when watched, see `stdin_should_be_watched`), and when its parent process dies
(env PEER_WATCH_PARENT=1 (default) | 0, checked every 0.5 s); a shutdown that hangs is cut short
after 5 s.

The peers import this module by name: Python puts the directory of the script it runs first on
sys.path, so the import works whatever the working directory.
"""

import asyncio
import os
import socket
import stat
import sys
import threading
import time

import uvicorn

_NO = ("0", "no", "false", "never")
_YES = ("1", "yes", "true", "always")


def bind(port):
    """A listening socket on 127.0.0.1:`port` (0: any free port), inheritable by uvicorn."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def stdin_should_be_watched(mode):
    """`mode` 1/yes/true/always: watch; 0/no/false/never: don't; anything else ("auto"): watch only a
    pipe or a socket, so that a peer started from a terminal or with stdin closed keeps running."""
    if mode in _NO:
        return False
    if mode in _YES:
        return True
    try:
        st = os.fstat(0)
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)


def run(sock, asgi_app, *, announce, log_level, watch_stdin_env):
    """Serves `asgi_app` on `sock` (see `bind`) until told to exit (see the module doc). `announce` is
    the line printed once listening, with `{port}` in it, e.g. "PORT={port}"; `watch_stdin_env` names
    the environment variable holding the stdin mode (see `stdin_should_be_watched`; default auto)."""
    watch_stdin_mode = os.environ.get(watch_stdin_env, "auto").strip().lower()
    asyncio.run(_serve(sock, asgi_app, announce, log_level, watch_stdin_mode))


async def _serve(sock, asgi_app, announce, log_level, watch_stdin_mode):
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
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
                print(f"[{name}] exiting: {reason}", file=sys.stderr, flush=True)
            server.should_exit = True

        loop.call_soon_threadsafe(_do)
        t = threading.Timer(5.0, lambda: os._exit(0))  # hard stop if graceful shutdown hangs
        t.daemon = True
        t.start()

    if stdin_should_be_watched(watch_stdin_mode):

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
        if os.environ.get("PEER_WATCH_PARENT", "1").strip().lower() in _NO:
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
    sys.stdout.write(announce.format(port=bound) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # stdout carries exactly one line; anything printed later goes to stderr
    await task
