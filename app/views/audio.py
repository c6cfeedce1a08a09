"""Audio page: per speech run, each stored clip's players (reference, reconstruction, baseline) side by side
with spectrograms and its scores; the runs' speech scores as a long table, score × (reconstruction, baseline)
(the scoRNN paper's Table 2). A clip's audio and spectrograms are read only when its panel is open."""

import pandas as pd
import streamlit as st

from ortholab.app import controls, table_fit
from ortholab.app.charts import show
from ortholab.app.figures import spectrogram_figure
from ortholab.app.labels import run_label
from ortholab.app.page import selected_runs_page
from ortholab.app.snapshots import no_snapshot_note, steps_of
from ortholab.app.wav import (
    SCORED_ROLES,
    clip_failures,
    clip_scores,
    failed_key,
    group_clips,
    scores_table,
    speech_key,
    speech_label,
)
from ortholab.db.artifacts import AUDIO

MAX_CLIPS = 8  # per run and step
OPEN_CLIPS = 1  # panels open when the page opens (the others load when opened)
NOT_SCORED = "—"  # a score the table has no value for (streamlit would show None)

reader, runs = selected_runs_page("Audio")

st.caption(
    "Clips play exactly as stored (the WAV bytes), so reference and reconstruction keep their relative "
    "loudness. Spectrograms: 32 ms Hann frames, 16 ms hop (256/128 samples at 8 kHz). A clip's players and "
    "spectrograms load when its panel is opened."
)
show_spectrograms = controls.toggle(st, "Spectrograms", key="audio_spectrograms", default=True)
recorded = {run.id: reader.artifacts(run.id, AUDIO) for run in runs}
for run in runs:
    if not recorded[run.id]:
        st.info(
            no_snapshot_note(run, "audio clips", reader.analyses_left_out)
            + " Speech tasks store reference and reconstruction clips."
        )


def clip_panel(run, clip) -> None:
    roles = clip.ordered_roles()
    for column, role in zip(st.columns(len(roles)), roles, strict=True):
        record = clip.roles[role]
        with column:
            st.markdown(f"**{role}**")
            st.audio(reader.artifact_bytes(record.id), format=record.media_type or "audio/wav")
            if show_spectrograms:
                try:
                    times, freqs, power, seconds, rate = reader.spectrogram(record.id)
                except ValueError as error:
                    st.caption(f"No spectrogram: {error}.")
                else:
                    title = f"{role} · {seconds:.2f} s at {rate} Hz"
                    show(spectrogram_figure(times, freqs, power, title=title), f"spec_{record.id}")
    by_role = {role: clip_scores(clip.roles[role].meta) for role in SCORED_ROLES if role in clip.roles}
    table = scores_table(by_role)
    if table:
        scores = pd.DataFrame(table)
        roles = [role for role in SCORED_ROLES if role in scores]  # 4 significant digits, as the table below
        st.dataframe(
            scores,
            hide_index=True,
            placeholder=NOT_SCORED,
            key=f"scores_{run.id}_{clip.step}_{clip.utterance}",
            column_config=table_fit.sized(
                scores,
                {role: st.column_config.NumberColumn(role, format="%.4g") for role in roles},
                formats=dict.fromkeys(roles, "%.4g"),
            ),
        )
    else:
        st.caption("No per-clip scores recorded for this clip.")
    for role in SCORED_ROLES:  # a score the evaluation could not compute says why, not a bare empty cell
        for score, reason in clip_failures(clip.roles[role].meta if role in clip.roles else None).items():
            st.caption(f"Not scored: {speech_label(score)} of the {role} ({reason}).")


for run in runs:
    records = recorded[run.id]
    if not records:
        continue
    st.header(run_label(run))
    steps = steps_of(records)
    step = (
        steps[0]
        if len(steps) == 1
        else controls.select_slider(st, "Step", steps, key=f"audio_step_{run.id}", default=steps[-1])
    )
    clips = [c for c in group_clips(records) if (c.step if c.step is not None else -1) == step]
    for index, clip in enumerate(clips[:MAX_CLIPS]):
        key = f"clip_{run.id}_{clip.step}_{clip.utterance}"
        panel = st.expander(
            f"{clip.utterance} · step {clip.step}", expanded=index < OPEN_CLIPS, key=key, on_change="rerun"
        )
        if panel.open:
            with panel:
                clip_panel(run, clip)
    if len(clips) > MAX_CLIPS:
        st.caption(f"{MAX_CLIPS} of {len(clips)} clips at this step shown.")

# ---- Table 2: speech scores across runs, long --------------------------------------------------------------
st.header("Speech scores across runs")
rows, failed = [], []
for run in runs:
    found: dict[tuple[str, str], dict[str, float]] = {}  # (split, score) -> role -> last value
    for key in reader.metric_keys(run.id):
        count = failed_key(key)
        if count and (n := reader.last_value(run.id, key)):
            split, role, score = count
            failed.append(
                f"{run_label(run)} ({split}): {speech_label(score)} of the {role} not scored on {n:g} utterances"
            )
        parsed = speech_key(key)
        if parsed:
            split, role, score = parsed
            found.setdefault((split, score), {})[role] = reader.last_value(run.id, key)
    for split in sorted({split for split, _ in found}):
        by_role = {
            role: {s: v[role] for (sp, s), v in found.items() if sp == split and role in v} for role in SCORED_ROLES
        }
        for row in scores_table({r: v for r, v in by_role.items() if v} or {"reconstruction": {}}):
            rows.append({"run": run_label(run), "family": run.family, "split": split, **row})
if rows:
    frame = pd.DataFrame(rows)
    for role in SCORED_ROLES:
        if role not in frame:
            frame[role] = None
    frame = frame[["run", "family", "split", "metric", *SCORED_ROLES]]
    st.dataframe(
        frame,
        hide_index=True,
        placeholder=NOT_SCORED,
        column_config=table_fit.sized(
            frame,
            {role: st.column_config.NumberColumn(role, format="%.4g") for role in SCORED_ROLES},
            formats=dict.fromkeys(SCORED_ROLES, "%.4g"),
        ),
    )
    st.caption(
        "The scoRNN paper's Table 2 view: each run's last recorded mean over the scored utterances, for the model's "
        f"reconstruction and the copy-a-frame baseline. {speech_label('segsnr_voicebox')} is the paper's SegSNR. "
        f"{NOT_SCORED}: not recorded, or not computable on any utterance."
    )
    if failed:  # as the command line's summary says 'n/a (12 failed)'
        st.caption(  # the clips stored may not be among the failed utterances: every reason is in the artifact
            "; ".join(failed) + " (a stored clip's panel above says why; for every utterance, the run's "
            "audio_scores artifact does: a JSON of each utterance's scores and reasons)."
        )
else:
    st.info(
        "No selected run has recorded SegSNR, STOI or PESQ yet; this table (the scoRNN paper's Table 2 view) "
        "fills in when speech runs record them."
    )
