"""The artifact kinds runs store, and how their bytes are encoded, shared by the writers and the dashboard.

| kind                | data                                   | meta                                                |
|---------------------|----------------------------------------|-----------------------------------------------------|
| `eigenvalues`       | .npy complex128 (n,): eig(W)           | {"near_minus_one": int, "tolerance": float}         |
| `phases`            | .npy float64 (n,): scuRNN's theta      | {}                                                  |
| `grad_norms`        | .npy float64 (T,): ||dL/dh_t|| over t  | {"probe_size": int}                                 |
| `hidden_trajectory` | .npy float32 (T, n): one probe's h_t   | {"unshifted": bool}                                 |
| `audio`             | WAV bytes (media_type audio/wav)       | {"utterance": str, "role": "reference",             |
|                     |                                        | "reconstruction" or "baseline", "sample_rate": int, |
|                     |                                        | headline scores}                                    |
| `audio_scores`      | JSON: every utterance's scores and     | {"split": str}                                      |
|                     | each failure's reason                  |                                                     |

Artifacts carry the training step (and epoch) at which they were taken.
"""

from __future__ import annotations

import io

import numpy as np

EIGENVALUES = "eigenvalues"
PHASES = "phases"
GRAD_NORMS = "grad_norms"
HIDDEN_TRAJECTORY = "hidden_trajectory"
AUDIO = "audio"
AUDIO_SCORES = "audio_scores"
NPY_MEDIA_TYPE = "application/x-npy"


def array_to_bytes(array: np.ndarray) -> bytes:
    """An array as .npy bytes (dtype and shape kept; no pickling)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def array_from_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)
