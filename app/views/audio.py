"""Audio page: per speech run, each stored clip's players (reference, reconstruction, baseline) side by side
with spectrograms and per-clip metrics; mean SegSNR/STOI/PESQ across runs (the scoRNN paper's Table 2)."""

import pandas as pd
import streamlit as st

from ortholab.app import data, state
from ortholab.app.figures import spectrogram_figure
from ortholab.app.labels import run_label
from ortholab.app.snapshots import no_snapshot_note, steps_of
from ortholab.app.wav import SPEECH_METRICS, clip_metrics, decode_wav, group_clips, spectrogram, speech_metric
from ortholab.db.artifacts import AUDIO

MAX_CLIPS = 8  # per run and step

reader = data.reader()
runs = reader.summaries(state.selected_ids())
st.title("Audio")
if not runs:
    st.info("No runs selected: pick runs in the sidebar or tick them on the Runs page.")
    st.stop()

st.caption(
    "Clips play exactly as stored (the WAV bytes), so reference and reconstruction keep their relative "
    "loudness. Spectrograms: 32 ms Hann frames, 16 ms hop (256/128 samples at 8 kHz)."
)
show_spectrograms = st.toggle("Spectrograms", value=True, key="audio_spectrograms")
recorded = {run.id: reader.artifacts(run.id, AUDIO) for run in runs}
for run in runs:
    if not recorded[run.id]:
        st.info(no_snapshot_note(run, "audio clips") + " Speech tasks store reference and reconstruction clips.")

clip_means: dict[int, dict[str, float]] = {}
for run in runs:
    records = recorded[run.id]
    if not records:
        continue
    st.header(run_label(run))
    steps = steps_of(records)
    step = steps[0] if len(steps) == 1 else st.select_slider("Step", steps, value=steps[-1], key=f"audio_step_{run.id}")
    clips = [c for c in group_clips(records) if (c.step if c.step is not None else -1) == step]
    per_clip = []
    for clip in clips[:MAX_CLIPS]:
        st.subheader(f"{clip.utterance} · step {clip.step}")
        roles = clip.ordered_roles()
        for column, role in zip(st.columns(len(roles)), roles, strict=True):
            record = clip.roles[role]
            wav = reader.artifact_bytes(record.id)
            with column:
                st.markdown(f"**{role}**")
                st.audio(wav, format=record.media_type or "audio/wav")
                if show_spectrograms:
                    try:
                        samples, rate = decode_wav(wav)
                    except ValueError as error:
                        st.caption(f"No spectrogram: {error}.")
                    else:
                        times, freqs, power = spectrogram(samples, rate)
                        title = f"{role} · {samples.size / rate:.2f} s at {rate} Hz"
                        st.plotly_chart(spectrogram_figure(times, freqs, power, title=title), key=f"spec_{record.id}")
        metrics = {}
        for role in roles:
            if role != "reference":
                metrics.update(
                    {f"{SPEECH_METRICS[k]} ({role})": v for k, v in clip_metrics(clip.roles[role].meta).items()}
                )
        if metrics:
            st.dataframe(pd.DataFrame([metrics]), hide_index=True)
            per_clip.append(clip_metrics((clip.roles.get("reconstruction") or clip.roles[roles[-1]]).meta))
        else:
            st.caption("No per-clip SegSNR/STOI/PESQ recorded for this clip.")
    if len(clips) > MAX_CLIPS:
        st.caption(f"{MAX_CLIPS} of {len(clips)} clips at this step shown.")
    if per_clip:
        frame = pd.DataFrame(per_clip)
        clip_means[run.id] = frame.mean().to_dict()

# ---- Table 2: mean speech metrics across runs -----------------------------------------------------
st.header("Speech metrics across runs")
rows = []
for run in runs:
    row = {}
    for key in reader.metric_keys(run.id):
        name = speech_metric(key)
        if name:
            row[f"{SPEECH_METRICS[name]} [{key}]"] = reader.metric(run.id, key)["value"].iloc[-1]
    if not row and run.id in clip_means:
        row = {f"{SPEECH_METRICS[k]} [mean of clips shown]": v for k, v in clip_means[run.id].items()}
    if row:
        rows.append({"run": run_label(run), "family": run.family, "parameters": run.parameter_count, **row})
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    st.caption("The scoRNN paper's Table 2 view: the last value of each run's SegSNR/STOI/PESQ metrics.")
else:
    st.info(
        "No selected run has recorded SegSNR, STOI or PESQ yet; this table (the scoRNN paper's Table 2 view) "
        "fills in when speech runs record them."
    )
