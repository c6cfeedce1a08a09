"""training/subnormals.py: the training process flushes subnormal floats to zero (in a subprocess: the mode is the
process's own, and this test process keeps IEEE subnormals)."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# 2^-130 is subnormal in float32; times 1 it stays so under IEEE rules and reads as 0 when flushed
PROBE = """
import torch
from ortholab.training.subnormals import flush_subnormals
took = flush_subnormals()
value = torch.tensor(2.0**-130, dtype=torch.float32) * 1.0
print(took, value.item() == 0.0)
"""


def _probe(setting: str | None) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ORTHOLAB_SUBNORMALS", None)
    if setting:
        env["ORTHOLAB_SUBNORMALS"] = setting
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="flush-to-zero checked on x86-64 (SSE3)")
def test_the_training_process_flushes_subnormals_unless_told_to_keep_them():
    assert _probe(None) == "True True"
    assert _probe("keep") == "False False"


# `ortholab fit` as the console script runs it (argv from sys.argv), Lightning's CLI replaced by a probe
FIT_PROBE = """
import sys
import torch
import ortholab.training.lightning_cli as lightning_cli

class Probe:
    def __init__(self, args=None, typed=None):
        print((torch.tensor(2.0**-130, dtype=torch.float32) * 1.0).item() == 0.0)

lightning_cli.OrthoLabCLI = Probe
sys.argv = ["ortholab", "fit", "--config", "configs/demo/copying_scornn.yaml"]
from ortholab.cli.main import main
main()
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="flush-to-zero checked on x86-64 (SSE3)")
def test_the_fit_command_flushes_subnormals_before_training():
    """`fit` flushes after reading its config files (so a bad one is told before torch's import), still before
    Lightning's CLI builds anything."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ORTHOLAB_SUBNORMALS", None)
    done = subprocess.run(
        [sys.executable, "-c", FIT_PROBE], capture_output=True, text=True, env=env, timeout=120, cwd=REPO
    )
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
