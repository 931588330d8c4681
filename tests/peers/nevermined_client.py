#!/usr/bin/env python3
"""Nevermined client driver built on the official `payments-py` package (0.7.3): every call of its
`AIQueryApi` (`payments.query`), in the order a subscriber and an agent's builder would make them.

  python nevermined_client.py --url http://127.0.0.1:PORT/prefix --key JWT --did DID [--timeout S]

--url   where payments-py's backend and proxy hosts both point (it joins host and path as text, so
        a route prefix survives).
--key   the NVM API key: any JWT with a `sub` (payments-py decodes it without checking the
        signature); interlingua verifies it as the route's bearer token.

Scenario (one task that asks for input once: input_additional {"mode": "input"}):
  create_task; get_task_with_steps until Not_Ready; get_steps_from_task (all, ?status=Not_Ready);
  get_step (the waiting step, by id); search_step by task; get_steps(Not_Ready, [did]);
  search_tasks(Not_Ready); get_tasks_from_agents(Not_Ready); create_steps (refused);
  update_step (the input) on the waiting step; get_task_with_steps until Completed;
  get_steps_from_task(?status=Completed); get_task_with_steps of an unknown task (an error).

With --scenario plain: create_task with --query and --additional (JSON), then get_task_with_steps
until Completed or Failed; nothing else.

Output: ONE JSON object on stdout, each call's result as payments-py returns it (pydantic models
dumped in JSON mode; raw responses as their JSON; errors as {"error": ..., "status": ...}).
Polling waits for a state with a deadline (--timeout, default 20 s) and fails the script past it.
"""

import argparse
import asyncio
import json
import sys
import time
import warnings

from payments_py import Environment, Payments
from payments_py.data_models import AgentExecutionStatus

warnings.simplefilter("ignore")


def dump(v):
    """A pydantic model, an ApiResponse or a requests.Response as JSON data."""
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json")
    if hasattr(v, "json") and hasattr(v, "status_code"):
        return {"status": v.status_code, "body": v.json()}
    return v


def failure(e):
    """The exception payments-py raises on a >= 400 answer: {data, status, headers}."""
    arg = e.args[0] if e.args else None
    if isinstance(arg, dict) and "status" in arg:
        return {"error": arg.get("data"), "status": arg.get("status")}
    return {"error": repr(e), "status": None}


def until(what, probe, done, timeout):
    """Calls probe() until done(result) holds; fails past the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}: last {dump(got)}")
        time.sleep(0.05)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--did", required=True)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--scenario", choices=["input", "plain"], default="input")
    ap.add_argument("--query", default="hello world")
    ap.add_argument("--additional", default="{}")
    a = ap.parse_args()

    payments = Payments(nvm_api_key=a.key, environment=Environment.local)
    q = payments.query
    # One options object, read on every call: both hosts are interlingua's route.
    q.opts.backend_host = a.url.rstrip("/")
    q.opts.proxy_host = a.url.rstrip("/")
    out = {}
    if a.scenario == "plain":
        return await plain(q, a, out)

    created = await q.create_task(
        a.did,
        {"input_query": "hello world", "name": "masumi", "input_additional": {"mode": "input"}},
    )
    out["create_task"] = dump(created)
    task_id = created.data["task"]["task_id"]

    waiting = until(
        "Not_Ready",
        lambda: q.get_task_with_steps(a.did, task_id),
        lambda t: t.task.task_status == "Not_Ready",
        a.timeout,
    )
    out["get_task_with_steps_waiting"] = dump(waiting)
    step_id = [s.step_id for s in waiting.steps if s.step_status == AgentExecutionStatus.Not_Ready][-1]

    out["get_steps_from_task"] = dump(q.get_steps_from_task(a.did, task_id))
    out["get_steps_from_task_not_ready"] = dump(q.get_steps_from_task(a.did, task_id, "Not_Ready"))
    out["get_step"] = dump(q.get_step(step_id))
    out["search_step"] = dump(q.search_step({"task_id": task_id}))
    out["get_steps"] = dump(q.get_steps(AgentExecutionStatus.Not_Ready, [a.did]))
    out["search_tasks"] = dump(q.search_tasks({"task_status": "Not_Ready"}))
    out["get_tasks_from_agents"] = dump(q.get_tasks_from_agents(AgentExecutionStatus.Not_Ready))
    refused = q.create_steps(a.did, task_id, {"steps": [{"task_id": task_id, "name": "extra"}]})
    out["create_steps"] = dump(refused)

    answered = q.update_step(
        a.did,
        task_id,
        step_id,
        {
            "step_id": step_id,
            "task_id": task_id,
            "step_status": "Pending",
            "input_query": "from payments-py",
            "input_additional": {"more": "from payments-py"},
        },
    )
    out["update_step"] = dump(answered)

    done = until(
        "Completed",
        lambda: q.get_task_with_steps(a.did, task_id),
        lambda t: t.task.task_status in ("Completed", "Failed"),
        a.timeout,
    )
    out["get_task_with_steps_done"] = dump(done)
    out["get_steps_from_task_completed"] = dump(q.get_steps_from_task(a.did, task_id, "Completed"))
    try:
        q.get_task_with_steps(a.did, "task-00000000-0000-4000-8000-000000000000")
        out["get_unknown_task"] = {"error": None, "status": 200}
    except Exception as e:  # payments-py raises a bare Exception holding the answer
        out["get_unknown_task"] = failure(e)
    out["step_id"] = step_id
    out["task_id"] = task_id
    return out


async def plain(q, a, out):
    """One task to its end: what a subscriber of a tool without questions does."""
    body = {"input_query": a.query, "name": "plain", "input_additional": json.loads(a.additional)}
    created = await q.create_task(a.did, body)
    out["create_task"] = dump(created)
    task_id = created.data["task"]["task_id"]
    done = until(
        "Completed or Failed",
        lambda: q.get_task_with_steps(a.did, task_id),
        lambda t: t.task.task_status in ("Completed", "Failed"),
        a.timeout,
    )
    out["get_task_with_steps_done"] = dump(done)
    out["task_id"] = task_id
    return out


if __name__ == "__main__":
    # payments-py prints as it goes: only the report goes to stdout.
    report_to = sys.stdout
    sys.stdout = sys.stderr
    try:
        report = asyncio.run(main())
    except SystemExit:
        raise
    except Exception as e:  # report what payments-py raised, with its answer
        print(json.dumps({"crashed": repr(e), "detail": failure(e)}), file=report_to)
        sys.exit(1)
    print(json.dumps(report), file=report_to)
