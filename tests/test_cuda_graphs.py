"""`model.cuda_graphs` (training/cuda_graphs.py): which passes are captured and which run eagerly, with a stand-in
capture on the CPU; the refusals in one line; on CUDA, captured training equal to eager training for every family
after several optimizer steps (the graphs read the parameters the steps change in place)."""

import copy
import math

import pytest
import torch
from devices import needs_cuda
from test_cli import DEMO
from tolerances import roundoff

from ortholab.cli.main import main
from ortholab.db import Store
from ortholab.errors import ConfigError
from ortholab.models import FAMILIES, SequenceModel, triton_recurrence
from ortholab.training import cuda_graphs, module
from ortholab.training.cuda_graphs import GraphedTraining, check_graphs_config

N, T, B, CLASSES, STEPS = 8, 6, 4, 3, 3
# whole-model capture worked for these on the H200 (benchmarks/results/gpu-check-h200-2026-11-28, call 2)
CAPTURED_ON_THE_H200 = ("scornn", "ornn", "scurnn", "urnn", "eurnn", "srnn")


class StandIn:
    """A capture that records what it was given and returns the module itself (graphs need a GPU)."""

    def __init__(self, fail: bool = False):
        self.shapes, self.fail = [], fail

    def __call__(self, module, sample_args):
        assert triton_recurrence._TORCH_LOOPS[0]  # captured passes take the torch loops, not the fused kernels
        self.shapes.append(tuple(sample_args[0].shape))
        if self.fail:
            raise RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture\nmore")
        return module


def small_model() -> SequenceModel:
    torch.manual_seed(0)
    return SequenceModel(FAMILIES["scornn"](2, N), CLASSES, readout="last_step")


def test_one_capture_per_shape_and_eager_beyond_max_shapes_and_in_evaluation():
    model, capture = small_model(), StandIn()
    graphed = GraphedTraining(model, capture=capture, max_shapes=2)
    full, last, third = torch.randn(B, T, 2), torch.randn(B - 1, T, 2), torch.randn(B - 2, T, 2)
    for x in (full, full, last, full, last, third):
        torch.testing.assert_close(graphed(x), model(x), rtol=0, atol=0)
    assert capture.shapes == [tuple(full.shape), tuple(last.shape)]  # the third shape ran eagerly, uncaptured
    assert set(graphed.graphs) == {(tuple(full.shape), torch.float32), (tuple(last.shape), torch.float32)}
    assert not triton_recurrence._TORCH_LOOPS[0]  # only while capturing
    model.eval()
    graphed(third)
    with torch.no_grad():
        model.train()
        graphed(torch.randn(B, T + 1, 2))
    assert len(capture.shapes) == 2  # evaluation and no-grad passes never capture


def test_a_failed_capture_warns_once_and_trains_eagerly_from_then_on():
    model, capture = small_model(), StandIn(fail=True)
    graphed = GraphedTraining(model, capture=capture)
    x = torch.randn(B, T, 2)
    with pytest.warns(UserWarning, match=r"capture failed \(RuntimeError: Cannot copy .*\); this run trains eagerly"):
        out = graphed(x)
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)
    graphed(torch.randn(B - 1, T, 2))
    assert len(capture.shapes) == 1 and graphed.failure.startswith("RuntimeError: Cannot copy")
    assert "more" not in graphed.failure  # the error's first line only


def test_max_shapes_below_one_is_refused():
    with pytest.raises(ValueError, match="max_shapes = 0"):
        GraphedTraining(small_model(), max_shapes=0)


def _fit(tmp_path, *extra: str) -> None:
    main(
        [
            "fit",
            "--config",
            DEMO,
            "--db",
            f"sqlite:///{tmp_path / 'store.db'}",
            "--runs_dir",
            str(tmp_path / "runs"),
            "--data.seq_len",
            "5",
            "--data.train_size",
            "40",
            "--data.batch_size",
            "10",
            "--data.val_size",
            "10",
            "--data.test_size",
            "10",
            "--trainer.max_steps",
            "4",
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.enable_progress_bar",
            "false",
            *extra,
        ]
    )


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (
            ["--trainer.accelerator", "cpu"],
            "model.cuda_graphs (on the command line): true needs a CUDA device, and this run trains on cpu",
        ),
        (
            ["--trainer.accelerator", "gpu", "--trainer.precision", "bf16-mixed"],
            "model.cuda_graphs (on the command line): true with trainer.precision bf16-mixed: autocast's cast cache "
            "cannot be captured",
        ),
    ],
)
def test_a_run_graphs_cannot_serve_is_refused_in_one_line_before_it_is_recorded(tmp_path, capsys, extra, says):
    with pytest.raises(SystemExit) as stop:
        _fit(tmp_path, "--model.cuda_graphs", "true", *extra)
    assert stop.value.code == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("Seed set")]
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "store.db").exists()  # refused from the config, before a run is recorded


@pytest.mark.parametrize(
    ("trainer", "processes"),
    [
        ({"devices": 2}, 2),
        ({"devices": [0, 1]}, 2),
        ({"devices": 1, "num_nodes": 2}, 2),
        ({"devices": 2, "num_nodes": 2}, 4),
    ],
)
def test_several_processes_are_refused(trainer, processes):
    with pytest.raises(ConfigError, match=f"model.cuda_graphs: true on {processes} processes: DDP's gradient hooks"):
        check_graphs_config({"cuda_graphs": True}, {"accelerator": "gpu", **trainer})
    check_graphs_config({"cuda_graphs": False}, {"accelerator": "gpu", **trainer})  # off: nothing to check


def test_fit_trains_through_the_capture_and_records_what_eager_fit_records(tmp_path, monkeypatch):
    # on the CPU with the stand-in capture: the module's training passes go through it, evaluation does not
    losses = {}
    for graphs in ("false", "true"):
        capture = StandIn()
        monkeypatch.setattr(torch.cuda, "make_graphed_callables", capture)
        for where in (cuda_graphs, module):
            monkeypatch.setattr(where, "check_graphs_allowed", lambda *args: None)
        folder = tmp_path / graphs
        _fit(folder, "--trainer.accelerator", "cpu", "--model.cuda_graphs", graphs)
        store = Store(f"sqlite:///{folder / 'store.db'}")
        (run,) = store.list_runs()
        assert run.status == "finished" and store.params_of([run.id])[run.id]["model.cuda_graphs"] is (graphs == "true")
        # one shape, the batch of 10 (40 samples): every training pass after the first replays that capture
        assert [shape[0] for shape in capture.shapes] == ([10] if graphs == "true" else [])
        losses[graphs] = [point.value for point in store.metric_series(run.id, "train/loss")]
    assert len(losses["true"]) == 4 and losses["true"] == losses["false"]


def _train(model, graphed, batches) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(graphed(x), y)
        loss.backward()
        optimizer.step()  # in place: the next replay reads the stepped parameters
        losses.append(loss.item())
    return losses


@needs_cuda
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_captured_training_equals_eager_training_on_cuda(family):
    torch.manual_seed(0)
    options = {"dropout": 0.0} if family == "rtransformer" else {}  # a replay draws other dropout masks than eager
    eager = SequenceModel(FAMILIES[family](2, N, **options), CLASSES, readout="last_step").cuda()
    captured = copy.deepcopy(eager)
    batches = [(torch.randn(B, T, 2, device="cuda"), torch.randint(0, CLASSES, (B,), device="cuda")) for _ in range(4)]
    batches.append((torch.randn(B - 1, T, 2, device="cuda"), torch.randint(0, CLASSES, (B - 1,), device="cuda")))
    graphed = GraphedTraining(captured)
    with triton_recurrence.torch_loops():  # the loops a capture takes, so that only the capture differs
        expected = _train(eager, eager, batches)
    got = _train(captured, graphed, batches)
    if family in CAPTURED_ON_THE_H200:
        assert graphed.failure is None and len(graphed.graphs) == 2, graphed.failure
    # the same kernels replayed; cuBLAS may pick another algorithm under capture: round-off of an n-term product
    # per step, over T steps, compounded by the optimizer steps taken
    bound = roundoff(torch.float32, n=N * T * (len(batches) + 1))
    for a, b in zip(expected, got):
        assert math.isclose(a, b, rel_tol=bound, abs_tol=bound), (family, expected, got, graphed.failure)
    for p, q in zip(eager.parameters(), captured.parameters()):
        torch.testing.assert_close(q, p, rtol=bound, atol=bound)


@needs_cuda
def test_scornn_through_fit_with_graphs_records_the_losses_of_eager_training(tmp_path):
    losses = {}
    for graphs in ("false", "true"):
        folder = tmp_path / graphs
        _fit(folder, "--trainer.accelerator", "gpu", "--trainer.devices", "1", "--model.cuda_graphs", graphs)
        store = Store(f"sqlite:///{folder / 'store.db'}")
        (run,) = store.list_runs()
        assert run.status == "finished"
        assert store.params_of([run.id])[run.id]["model.cuda_graphs"] is (graphs == "true")  # recorded with the run
        losses[graphs] = [point.value for point in store.metric_series(run.id, "train/loss")]
    # the demo's n = 190 terms a product, over its 25 steps, compounded by the 4 optimizer steps (and the loss)
    bound = roundoff(torch.float32, n=190 * 25 * 5)
    assert len(losses["true"]) == 4
    for a, b in zip(losses["false"], losses["true"]):
        assert math.isclose(a, b, rel_tol=bound, abs_tol=bound), losses
