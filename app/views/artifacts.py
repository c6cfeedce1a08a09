"""Artifacts page: what a callback of one's own records with `record_artifact` (docs/configs.md), of every kind no
other page draws: numbers and 1-D arrays over the steps, 2-D arrays as heatmaps, images, audio, JSON, and the meta
and bytes of anything else."""

import json

import numpy as np
import streamlit as st

from ortholab.app import controls
from ortholab.app.charts import show
from ortholab.app.figures import Line, heatmap_figure, lines_figure
from ortholab.app.labels import run_label
from ortholab.app.own_artifacts import DRAWN_ELSEWHERE, OVER_STEPS, own_kinds, real_values, shown_as
from ortholab.app.page import selected_runs_page
from ortholab.app.smoothing import thin
from ortholab.app.snapshots import at_step, by_step, steps_of
from ortholab.db.artifacts import NPY_MEDIA_TYPE

MAX_PROFILES = 12  # snapshot lines per run chart

reader, runs = selected_runs_page("Artifacts")
records = {run.id: reader.artifacts(run.id) for run in runs}
kinds = own_kinds(r for rs in records.values() for r in rs)
if not kinds:
    st.info(
        "No selected run records artifacts of a kind of its own: a callback's `record_artifact(trainer, kind, name, "
        "step, ...)` puts them here (docs/configs.md, 'A callback of your own'); "
        f"{', '.join(sorted(DRAWN_ELSEWHERE))} have pages of their own."
    )
    st.stop()


def array(record) -> np.ndarray | None:
    return reader.artifact_array(record.id) if record.media_type == NPY_MEDIA_TYPE else None


kind_col, name_col = st.columns(2)
kind = controls.selectbox(kind_col, "Kind", kinds, key="own_kind", default=kinds[0])
names = sorted({r.name for rs in records.values() for r in rs if r.kind == kind})
name = controls.selectbox(name_col, "Name", names, key=f"own_name_{kind}", default=names[0])
series = {run.id: by_step(r for r in records[run.id] if r.kind == kind and r.name == name) for run in runs}
shown = [run for run in runs if series[run.id]]
how = {run.id: shown_as(series[run.id][-1], array(series[run.id][-1])) for run in shown}
steps = steps_of(*(series[run.id] for run in shown if how[run.id] not in OVER_STEPS))
step = steps[-1] if steps else None
if len(steps) > 1:  # what is shown at one step; numbers and 1-D arrays are drawn at every step
    step = controls.select_slider(
        st, "Step (each run shows its latest artifact at or before it)", steps, key="own_step", default=steps[-1]
    )
st.caption(f"'{kind}' / '{name}' in {len(shown)} of the {len(runs)} selected runs.")


def profiles(run, chosen) -> None:
    """One line per step of a 1-D array (early dark, late bright), thinned to MAX_PROFILES."""
    lines, what = [], kind
    for record in [chosen[i] for i in thin(len(chosen), MAX_PROFILES)]:
        ys, modulus = real_values(array(record))
        what = f"|{kind}|" if modulus else kind
        lines.append(Line(f"step {record.step}", np.arange(ys.size), ys))
    show(lines_figure(lines, x_title="index", y_title=what, sequential=True, title=name), f"own_{run.id}")
    left = f"; {len(lines)} of {len(chosen)} steps drawn, evenly spaced" if len(lines) < len(chosen) else ""
    st.caption(f"One line per step, early dark, late bright{left}.")


def one_step(run, record, shown: str) -> None:
    """The artifact at the chosen step: a heatmap, an image, a clip, JSON, or its meta and bytes."""
    title = f"{name} · step {record.step}"
    if shown == "heatmap":
        z, modulus = real_values(array(record))
        what = f" (|{kind}|)" if modulus else ""
        show(heatmap_figure(z, x_title="column", y_title="row", title=title + what), f"own_{run.id}")
    elif shown == "shape":
        st.write(f"{title}: an array of shape {array(record).shape}, not drawn (arrays of one or two axes are)")
    elif shown == "image":
        st.image(reader.artifact_bytes(record.id), caption=title)
    elif shown == "audio":
        st.audio(reader.artifact_bytes(record.id), format=record.media_type)
    elif shown == "json":
        st.json(json.loads(reader.artifact_bytes(record.id)), expanded=2)
    data = reader.artifact_bytes(record.id) if shown == "meta" else b""
    if record.meta:
        st.json(record.meta, expanded=shown == "meta")
    if data:
        mime = record.media_type or "application/octet-stream"
        label, file_name = f"Download {title} ({len(data)} bytes)", f"{kind}-{name}-{record.step}"
        st.download_button(label, data, file_name=file_name, mime=mime, key=f"own_download_{run.id}")
    elif shown == "meta" and not record.meta:
        st.write(f"{title}: recorded with neither data nor meta")


values = []  # one number per step: one line per run, drawn last
for run in shown:
    chosen = series[run.id]
    if how[run.id] == "value":
        ys = [real_values(array(record).reshape(-1))[0][0] for record in chosen]
        values.append(Line(run_label(run), np.array([r.step for r in chosen]), np.array(ys), run.id))
        continue
    st.subheader(run_label(run))
    if how[run.id] == "profile":
        profiles(run, chosen)
    elif (record := at_step(chosen, step)) is None:
        st.info(f"{run_label(run)}: nothing recorded at or before step {step}.")
    else:
        one_step(run, record, shown_as(record, array(record)))

if values:
    show(lines_figure(values, x_title="step", y_title=name, title=f"{kind} · {name}"), "own_values")
