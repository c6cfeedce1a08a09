"""Active speech level and a per-sample activity mask: ITU-T P.56 method B as VOICEBOX's `v_activlev` (Brookes)
computes it with its default options, which `v_snrseg` uses to keep only frames of active speech.

Reimplemented from the definition (VOICEBOX is GPL; nothing is copied), default mode only:
1. band-pass: a 5th-order Chebyshev type II high-pass with -0.25 dB at 200 Hz and a 50 dB stop band (bilinear
   transform, gain 1 at Nyquist), then the low-pass counterpart at 5.5 kHz (gain 1 at DC) only when
   fs >= 12.1 kHz, as v_activlev skips it at lower rates (so at 8 kHz);
2. 0.35 s of zeros appended; envelope = |x| through two first-order smoothers with a 30 ms time constant;
3. each sample's envelope falls in a 3 dB bin (powers of two of envelope², 20 bins below the maximum, held by a
   200 ms hangover = running maximum); for each bin threshold c_j, a_j = signal energy / samples above it;
   the active level is where a_j - c_j first rises through 15.9 dB (linear interpolation between bins);
4. a sample is active when its envelope's 200 ms running maximum exceeds the active level's amplitude - 15.9 dB.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.ndimage
import scipy.signal

THRESHOLD_DB = 15.9  # P.56 margin between active level and the activity threshold
BINS = 20  # 60 dB at 3 dB per bin
# s-plane zeros and poles of the 5th-order Chebyshev II high-pass, -0.25 dB at w = 1, -50 dB stop band (VOICEBOX)
_HP_ZEROS = np.array([0, 0.37843443673309j, 0.23388534441447j, -0.37843443673309j, -0.23388534441447j])
_HP_POLES = np.array(
    [
        -0.66793268833792,
        -0.20640255179496 + 0.73942185906851j,
        -0.54036889596392 + 0.45698784092898j,
        -0.20640255179496 - 0.73942185906851j,
        -0.54036889596392 - 0.45698784092898j,
    ]
)


@dataclass(frozen=True)
class ActiveLevel:
    level: float  # active speech power (0 for a silent signal)
    activity: float  # fraction of the time speech is active (0 to 1)
    active: np.ndarray  # bool per input sample


def _high_pass(fs: float, cutoff: float = 200.0) -> np.ndarray:
    """Second-order sections of the P.56 high-pass at `cutoff` Hz, scaled to gain 1 at Nyquist."""
    warp = np.tan(np.pi * cutoff / fs)
    zeros, poles = (1 + _HP_ZEROS * warp) / (1 - _HP_ZEROS * warp), (1 + _HP_POLES * warp) / (1 - _HP_POLES * warp)
    numerator, denominator = np.real(np.poly(zeros)), np.real(np.poly(poles))
    nyquist = np.polyval(numerator, -1.0) / np.polyval(denominator, -1.0)
    return scipy.signal.tf2sos(numerator / nyquist, denominator)


def _low_pass(fs: float, cutoff: float = 5500.0) -> np.ndarray:
    """Second-order sections of the P.56 low-pass at `cutoff` Hz (the high-pass prototype, s -> 1/s), DC gain 1."""
    warp = np.tan(np.pi * cutoff / fs)
    zeros, poles = 2 / (_HP_ZEROS / warp - 1) + 1, 2 / (_HP_POLES / warp - 1) + 1
    numerator, denominator = np.real(np.poly(zeros)), np.real(np.poly(poles))
    return scipy.signal.tf2sos(numerator * denominator.sum() / numerator.sum(), denominator)


def _running_max(values: np.ndarray, window: int) -> np.ndarray:
    """y[p] = max(values[p - window + 1 .. p]), values before the start taken as -inf (v_maxfilt with f = 1)."""
    return scipy.ndimage.maximum_filter1d(values, size=window, mode="constant", cval=-np.inf, origin=(window - 1) // 2)


def active_level(signal: np.ndarray, fs: float) -> ActiveLevel:
    """P.56 active level, activity factor and per-sample activity of `signal` (see the module docstring)."""
    signal = np.asarray(signal, dtype=np.float64)
    length = len(signal)
    padded = np.concatenate([signal, np.zeros(int(np.ceil(0.35 * fs)))])
    filtered = scipy.signal.sosfilt(_high_pass(fs), padded)
    if fs >= 5500 * 2.2:  # v_activlev adds the 5.5 kHz low-pass only at rates that leave room for it
        filtered = scipy.signal.sosfilt(_low_pass(fs), filtered)
    g = np.exp(-1.0 / (fs * 0.03))  # 30 ms envelope smoothing
    envelope = scipy.signal.lfilter([(1 - g) ** 2], [1.0, -2 * g, g * g], np.abs(filtered))
    hangover = int(np.ceil(0.2 * fs)) + 1
    mantissa, exponent = np.frexp(envelope**2)
    exponent = np.where(mantissa == 0, -np.inf, exponent.astype(np.float64))
    exponent = _running_max(exponent, hangover)
    energy = float(np.sum(filtered**2))
    if not np.isfinite(exponent).any() or energy == 0.0:
        return ActiveLevel(0.0, 0.0, np.zeros(length, dtype=bool))
    top = exponent.max() + 1
    bins = np.minimum(top - exponent, BINS).astype(int)  # 1..BINS; bin k: 2^(top-k-1) <= envelope^2 < 2^(top-k)
    counts = np.cumsum(np.bincount(bins, minlength=BINS + 1)[1:])  # samples at or above each bin's lower limit
    with np.errstate(divide="ignore"):
        a = 10 * np.log10(energy / counts)  # active level if the threshold were bin j's lower limit
    c = 10 * np.log10(2) * (top - np.arange(1, BINS + 1) - 1)  # lower limit of bin j in dB
    margin = a - c - THRESHOLD_DB
    crossing = np.flatnonzero((margin[:-1] < 0) & (margin[1:] >= 0))
    if crossing.size:
        j = crossing[0]
        fraction = 1 / (1 - margin[j + 1] / margin[j])
    elif margin[-1] <= 0:
        j, fraction = BINS - 2, 1.0
    else:
        j, fraction = 0, 0.0
    level_db = a[j] + fraction * (a[j + 1] - a[j])
    level = 10 ** (level_db / 10)
    held = _running_max(envelope[:length], hangover)
    active = held > np.sqrt(level) / 10 ** (THRESHOLD_DB / 20)
    return ActiveLevel(level, energy / (len(padded) * level), active)
