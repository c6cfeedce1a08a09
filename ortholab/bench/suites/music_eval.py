"""`ortholab bench --suite music-eval`: one validation pass over a polyphonic-music split (no gradient) in three
batchings: the file's order in batches of `batch` pieces (OrthoLab's before 2026-11-25), pieces of similar length in
batches of `batch` (the music task's validation and test loaders since), and one piece at a time (the R-Transformer
script's evaluation). A batch is padded to its longest piece, so the order sets the padded work; the NLL per step is
the same in all three (printed beside the ratios)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch

from ortholab.bench.families import machine
from ortholab.bench.suites.common import SuiteResult, alternating_medians
from ortholab.bench.suites.settings import MusicEval
from ortholab.datamodules.music import PolyphonicMusic


def _task(settings: MusicEval, folder: Path) -> PolyphonicMusic:
    if settings.synthetic:  # random pieces of 3 to 40 steps in a stand-in pickle: no data file needed
        import pickle

        generator = torch.Generator().manual_seed(0)
        pieces = {
            split: [
                [
                    sorted(torch.randperm(88, generator=generator)[:3].add(21).tolist())
                    for _ in range(int(torch.randint(3, 41, (1,), generator=generator)))
                ]
                for _ in range(settings.synthetic)
            ]
            for split in ("train", "valid", "test")
        }
        path = folder / "synthetic.pickle"
        path.write_bytes(pickle.dumps(pieces))
        return PolyphonicMusic(dataset=settings.dataset, path=str(path), eval_batch_size=settings.batch)
    return PolyphonicMusic(dataset=settings.dataset, path=settings.path or None, eval_batch_size=settings.batch)


def run(settings: MusicEval) -> SuiteResult:
    import tempfile

    from ortholab.training.module import RecurrentModule

    with tempfile.TemporaryDirectory() as folder:
        task = _task(settings, Path(folder))
    torch.manual_seed(0)
    module = RecurrentModule(task.spec, family=settings.family, hidden_size=settings.hidden).to(settings.device).eval()
    nll: dict[str, float] = {}

    def evaluate(batching: tuple[str, int, bool]) -> float:
        name, batch, by_length = batching
        task.evaluate_by_length = by_length
        metrics = module.objective.metrics()
        start = time.perf_counter()
        with torch.no_grad():
            for inputs, targets, mask in task._loader("val", batch, False, by_length=True):
                inputs, targets, mask = (t.to(settings.device) for t in (inputs, targets, mask))
                module.objective.update(metrics, module(inputs), targets, mask)
            nll[name] = float(metrics["nll"].compute())
        return time.perf_counter() - start

    batchings = {
        f"file order, {settings.batch} a batch": ("file order", settings.batch, False),
        f"by length, {settings.batch} a batch": ("by length", settings.batch, True),
        "one piece at a time": ("one piece", 1, False),
    }
    seconds = alternating_medians(batchings, evaluate, settings.repeats)
    names = list(batchings)
    notes = [
        f"{task.pieces('val')} validation pieces; {settings.family} at hidden size {settings.hidden}; NLL per step "
        + ", ".join(f"{name} {value:.9g}" for name, value in nll.items())
    ]  # 9 digits: a float32 exactly
    result = SuiteResult("music-eval", machine(), asdict(settings), seconds, {}, notes)
    result.ratio(names[0], names[1], "file order / by length")
    result.ratio(names[2], names[1], "one piece at a time / by length")
    return result
