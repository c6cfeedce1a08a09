"""Timing's `memory/peak_mb` on CPU is the process peak resident memory: VmHWM on Linux, ru_maxrss elsewhere."""

import io
import resource
import sys

import pytest
import torch

from ortholab.training.callbacks import timing


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")
def test_cpu_peak_is_linux_vmhwm():
    peak = timing.peak_memory_mb(torch.device("cpu"))
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    hwm_kb, rss_kb = int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])
    assert abs(peak - hwm_kb / 1024) <= 1  # the same counter, read a moment apart
    assert peak >= rss_kb / 1024 - 1  # a peak, not the current resident size


def test_the_peak_is_read_from_vmhwm(monkeypatch):
    status = "Name:\tpython\nVmPeak:\t 9999999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n"
    monkeypatch.setattr(timing, "open", lambda *args, **kwargs: io.StringIO(status), raising=False)
    assert timing.process_peak_resident_mb() == 2.0


def test_without_proc_the_peak_falls_back_to_ru_maxrss(monkeypatch):
    def no_proc(*args, **kwargs):
        raise FileNotFoundError("/proc/self/status")

    monkeypatch.setattr(timing, "open", no_proc, raising=False)
    expected = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    assert timing.process_peak_resident_mb() == pytest.approx(expected, rel=0.05)
