"""torchaudio, checked once: its pure-PyTorch transforms must work on this machine's torch.

PyPI's torchaudio 2.11 wheel is built against CUDA torch; with a CPU torch its compiled extension
(torchaudio/lib/*.so) fails to load and `import torchaudio` raises. torchaudio skips that extension when the
files are absent, and the transforms the speech task uses (Spectrogram, InverseSpectrogram, GriffinLim,
Resample) are plain PyTorch. `tools/install_torchaudio.py` installs it that way; this module checks the result
on first use and says how to fix it when it does not work.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path

import torch

from ortholab.errors import ConfigError

INSTALLER = Path(__file__).resolve().parents[1] / "tools" / "install_torchaudio.py"  # in a checkout, not a wheel


def torchaudio_lib() -> Path:
    """The folder of torchaudio's compiled libraries in this environment, found without importing torchaudio
    (importing is what fails); where it is not installed yet, where this Python's pip will put it."""
    import importlib.util
    import sysconfig

    try:
        spec = importlib.util.find_spec("torchaudio")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "lib"
    return Path(sysconfig.get_paths()["purelib"]) / "torchaudio" / "lib"


def install_hint(installer: Path = INSTALLER) -> str:
    """How to install torchaudio here: the checkout's installer, or from a wheel the two steps it takes, both with
    this Python (`pip` on PATH may be another environment's: the wheel's venv is often not activated), quoted for a
    shell (a path with a space)."""
    python = shlex.quote(sys.executable)
    if installer.is_file():
        return (
            f"install it with `{python} {shlex.quote(str(installer))}` (torchaudio 2.11.0 without its compiled CUDA "
            "extension; see docs/troubleshooting.md (torchaudio))"
        )
    return (
        f"install it with `{python} -m pip install --no-deps torchaudio==2.11.0`, then, unless torch is a CUDA 2.11 "
        f"build, delete the compiled libraries torchaudio/lib/*.so (`rm {shlex.quote(str(torchaudio_lib()))}/*.so`; "
        "they need that torch; the speech task uses none of them)"
    )


@functools.cache
def torchaudio_transforms():
    """`torchaudio.transforms`, after checking that the four transforms the speech task uses run here."""
    try:
        from torchaudio import transforms
    except (ImportError, OSError) as err:  # OSError: the CUDA-linked extension failed to load
        raise ConfigError(f"torchaudio is not usable here ({type(err).__name__}: {err}); {install_hint()}") from err
    try:
        signal = torch.sin(torch.arange(1024, dtype=torch.float32) * 0.05)
        half = transforms.Resample(16000, 8000)(signal)
        frames = transforms.Spectrogram(n_fft=64, hop_length=32, power=None)(half)
        back = transforms.InverseSpectrogram(n_fft=64, hop_length=32)(frames, length=half.shape[-1])
        transforms.GriffinLim(n_fft=64, hop_length=32, n_iter=2, power=1.0)(frames.abs())
    except Exception as err:
        raise ConfigError(f"torchaudio's transforms fail here ({type(err).__name__}: {err}); {install_hint()}") from err
    if half.shape[-1] != 512 or not torch.allclose(back, half, atol=1e-4):
        raise ConfigError(f"torchaudio's STFT round trip is wrong on this machine; {install_hint()}")
    return transforms
