"""Tell the story of ``make demo`` from the log of ``airflow dags test``: each try of each task, in order.

For every try it prints the steps the durable layer replayed or ran (the ``Durable:`` lines and the
tools' own lines), why the try failed (the exception's last line, not only "Task failed with
exception") and the state Airflow gave it; then how the DAG run ended and what each task returned
(read from the demo's metadata database). Usage: ``python scripts/demo_story.py LOGFILE``, with the
demo's ``AIRFLOW_HOME`` in the environment.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass, field

# "2026-11-23T16:07:53.460050Z [info     ] message [logger] key=value ..."
_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ \[(?P<level>\w+)\s*\] (?P<message>.*?) +\[(?P<logger>[\w.]+)\](?P<rest>.*)$")
_STARTING = re.compile(r"\[DAG TEST\] starting task_id=(?P<task_id>\S+) map_index=(?P<map_index>-?\d+)")
_NEW_STATE = re.compile(r"\bnew_state=(\w+)")
_RUN_STATE = re.compile(r"\bstate=(\w+)")
_TOOL_LINE = re.compile(r"^\w+\(.*\) called\b")


@dataclass
class Try:
    task_id: str
    number: int
    lines: list[str] = field(default_factory=list)
    failure: str | None = None
    state: str | None = None


def read_story(lines: list[str]) -> tuple[list[Try], str | None]:
    """The tries in the order they ran, and the DAG run's final state."""
    tries: list[Try] = []
    started: Counter[str] = Counter()
    current: Try | None = None
    in_traceback = False
    run_state = None
    for raw in lines:
        line = raw.rstrip("\n")
        match = _LINE.match(line)
        if match is None:
            # A traceback: its last unindented line ("ConnectionError: ...") is the reason.
            if in_traceback and current is not None and line and not line.startswith((" ", "Traceback")):
                current.failure = line.strip()
            continue
        in_traceback = False
        level, message, rest = match["level"], match["message"], match["rest"]
        starting = _STARTING.search(message)
        if starting:
            task_id, map_index = starting["task_id"], starting["map_index"]
            task = task_id if map_index == "-1" else f"{task_id}[{map_index}]"
            started[task] += 1
            current = Try(task_id=task, number=started[task])
            tries.append(current)
        elif message.startswith("DagRun Finished"):
            state = _RUN_STATE.search(message)
            run_state = state.group(1) if state else None
        elif current is None:
            continue
        elif message.startswith("Task failed with exception"):
            in_traceback = True
        elif message.startswith("Task instance state updated"):
            state = _NEW_STATE.search(rest)
            current.state = state.group(1) if state else current.state
        elif message.startswith("Durable:") or _TOOL_LINE.match(message):
            prefix = "WARNING " if level == "warning" else ("ERROR " if level == "error" else "")
            current.lines.append(prefix + message)
    return tries, run_state


def results(dag_id: str) -> dict[str, object]:
    """What each task of the latest run of ``dag_id`` returned (its ``return_value`` XCom)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.sdk.execution_time.xcom import XCom
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run_id = session.scalars(
            select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).limit(1)
        ).first()
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == "return_value"
            )
        ).all()
        return {row.task_id: XCom.deserialize_value(row) for row in rows}


def main(path: str, dag_id: str = "example_durable_agent") -> None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        tries, run_state = read_story(handle.readlines())
    for attempt in tries:
        print(f"\n== {attempt.task_id}, try {attempt.number} ==")
        for line in attempt.lines:
            print(f"   {line}")
        if attempt.failure:
            print(f"   -> try {attempt.number} failed: {attempt.failure}")
        print(f"   -> state: {attempt.state or 'unknown'}")
    print(f"\n== DAG run: {run_state or 'unknown'} ==")
    returned = results(dag_id)
    for task_id in dict.fromkeys(attempt.task_id for attempt in tries):
        if task_id in returned:
            print(f"   {task_id} returned: {returned[task_id]!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
