"""Install torchaudio for the speech task so that it works with a CPU-only torch, and check that it does.

Why: PyPI's newest torchaudio (2.11.0) is one wheel built against CUDA torch 2.11. With the CPU torch 2.13
this project installs, `import torchaudio` fails while loading its compiled extension
(torchaudio/lib/_torchaudio.abi3.so needs libc10_cuda.so). torchaudio skips that extension when its files are
absent, and everything the speech task uses (Spectrogram, InverseSpectrogram, GriffinLim, Resample) is plain
PyTorch. So this script:
  1. pip-installs torchaudio==2.11.0 with --no-deps (its wheel declares no dependencies; --no-deps also makes sure
     pip never swaps the installed torch for another build),
  2. deletes the compiled libraries torchaudio/lib/*.so (lib/__init__.py stays): what is lost are torchaudio's
     C++ ops (forced alignment, RNN-T loss, CTC decoders, the compiled lfilter), none of which this project uses,
  3. runs the four transforms in a fresh interpreter and exits non-zero when they fail.
Audio files are read and written with soundfile, never torchaudio.load/save (those need torchcodec and FFmpeg).

Usage: .venv/bin/python tools/install_torchaudio.py      (idempotent; run it again after any torchaudio upgrade)
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

VERSION = "2.11.0"
REPO = Path(__file__).resolve().parents[1]
# the project's own check (datamodules/torchaudio_check.py), loaded by path: it needs torch only, not the project
CHECK = (
    "import importlib.util as u; s = u.spec_from_file_location('check', 'datamodules/torchaudio_check.py'); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); m.torchaudio_transforms(); print('ok')"
)


def torchaudio_dir() -> Path | None:
    """torchaudio's package folder, found without importing it (importing is what fails)."""
    spec = importlib.util.find_spec("torchaudio")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed in this environment; install it first (e.g. pip install torch==2.13.0)")
        return 1
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", f"torchaudio=={VERSION}"], check=True)
    importlib.invalidate_caches()
    package = torchaudio_dir()
    if package is None:
        print("torchaudio did not install")
        return 1
    removed = sorted((package / "lib").glob("*.so"))
    for library in removed:
        library.unlink()
    print(f"removed {len(removed)} compiled libraries from {package / 'lib'}: {[p.name for p in removed]}")
    check = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, check=False)
    if check.returncode != 0 or check.stdout.strip() != "ok":
        print(f"torchaudio does not work here:\n{check.stdout}{check.stderr}")
        return 1
    print(f"torchaudio {VERSION}: Spectrogram, InverseSpectrogram, GriffinLim and Resample work on the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
