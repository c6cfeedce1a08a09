"""A running run's progress as `ortholab runs` and the dashboard's Runs page show it: steps of its plan, the epoch
and an ETA from its recent step times."""

from __future__ import annotations

from datetime import datetime

from ortholab.db.lease import silence

ENDED = "its process ended: killed?"  # a running run whose lease names a process of this machine that is gone
PACE_POINTS = 5  # the ETA uses the median of the last five recorded step times (`time/step_s`)


def run_progress(store, run, now: datetime) -> dict:
    """`total_steps`, `epoch` ('k/N', or 'k' without an epoch budget) and `eta_s` of a running run, from the plan
    recorded at its start (Store.run_plan) and its recent pace; a run silent for minutes (killed with its machine)
    or whose process on this machine is gone (SIGKILL) gets `silent` instead of an ETA. {} for a run that is not
    running."""
    if run.status != "running":
        return {}
    plan = store.run_plan(run.id)
    total, per_epoch, epochs = plan.get("total_steps"), plan.get("steps_per_epoch"), plan.get("max_epochs")
    out = {"total_steps": total}
    if per_epoch:
        out["epoch"] = f"{run.steps // per_epoch}/{epochs}" if epochs else str(run.steps // per_epoch)
    ended = store.frozen_at is None and store.holder_ended(run.id)  # a frozen copy's holder is the source store's
    silent = ENDED if ended else silence(run.heartbeat_at, now)  # a process known gone says so, however long ago
    if silent:  # killed outright (a machine's end, SIGKILL): no ETA; `ortholab reproduce --resume` goes on
        out["silent"] = silent
        return out
    times = store.recent_values(run.id, "time/step_s", PACE_POINTS)
    if total and times:
        out["eta_s"] = max(total - run.steps, 0) * sorted(times)[len(times) // 2]
    return out


def steps_of_plan(steps: int, total: int | None) -> str:
    """'700/10000' for a run with a known plan, else the steps so far."""
    return f"{steps}/{total}" if total else str(steps)


def duration(seconds: float | None) -> str | None:
    """'1h26m' or '7m' (rounded to the minute), '<1m' under half a minute; None stays None."""
    if seconds is None:
        return None
    minutes = round(seconds / 60)
    if minutes == 0 and seconds > 0:  # a run about to end: not '0m', which reads as ended
        return "<1m"
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def copy_note(db) -> str | None:
    """For a store an export copied (its runs.db): when, and that its running runs are shown as they were then.
    `db`: an open Store, or the URL (or None: the default store) to open one for reading."""
    from ortholab.db import Store

    frozen_at = (db if isinstance(db, Store) else Store(db, access="read")).frozen_at
    if frozen_at is None:  # a live store, or a copy restored as one and written to since
        return None
    return (
        f"a copy an export wrote on {frozen_at:%Y-%m-%d %H:%M} UTC: its runs as they were then (a running one trains "
        f"on elsewhere)"
    )


def runs_rows(db_url: str | None) -> list[dict]:
    """Every run of the store at `db_url` as a row of `ortholab runs` (a running run with its progress)."""
    from ortholab.db import Store

    store = Store(db_url, access="read")  # a reader: never creates a store, opens a read-only one read-only
    rows, now = [], store.clock()  # an export's copy: as it was when copied
    for run in store.list_runs():
        d = run.to_dict()
        row = {
            "id": d["id"],
            "name": d["name"],
            "stage": d["stage"],
            "family": d["family"],
            "task": d["task"],
            "status": d["status"],
            "steps": d["steps"],
            "main_metric": d["main_metric"],
            "best": d["best"],
            "baseline": d["baseline"],
            "started": d["created_at"],
            "tags": d["tags"],
            "reason": d.get("reason"),  # why it failed or stopped, when known
        }
        row.update(run_progress(store, run, now))  # running runs only: the only rows whose progress changes
        rows.append(row)
    return rows
