"""The task configs: every one parses, and `ortholab fit` on each small demo records the task's main metric."""

from pathlib import Path

import pytest
import yaml
from standins import SHARED_DATA, write_text_set

from ortholab.cli.main import main
from ortholab.db import Store

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(
    str(path.relative_to(REPO / "configs"))
    for folder in ("demo", "papers")
    for path in (REPO / "configs" / folder).glob("*.yaml")
)  # every runnable config
QUICK = [
    "--trainer.max_steps",
    "3",
    "--trainer.val_check_interval",
    "3",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--trainer.limit_val_batches",
    "2",
    "--trainer.enable_progress_bar",
    "false",
    "--trainer.enable_model_summary",
    "false",
]


@pytest.mark.parametrize("config", CONFIGS)
def test_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(REPO / "configs" / config), "--print_config"])
    assert exit_info.value.code == 0
    first_line = (REPO / "configs" / config).read_text().splitlines()[0]
    assert first_line.startswith("# ") and len(first_line) > 20
    assert "class_path: datamodules." in capsys.readouterr().out


# 4 utterances of 2 recordings per split, their features cached under the runs folder (a relative cache_dir), 1
# utterance evaluated as audio
SPEECH_TINY = [
    "--data.max_utterances",
    "4",
    "--data.recordings_per_utterance",
    "2",
    "--data.batch_size",
    "2",
    "--data.cache_dir",
    "cache",
    "--trainer.callbacks.utterances",
    "1",
    "--trainer.callbacks.clips",
    "1",
]


def tiny_text(tmp_path):
    line = "the quick brown fox jumps over the lazy dog and the cat sat on the mat\n"
    return write_text_set(tmp_path / "text", line * 20, line * 4, line * 4)


@pytest.mark.parametrize(
    "config, extra, main_metric, needs",
    [
        ("demo/mnist_digits_scornn.yaml", [], "val/acc", None),
        ("demo/music_jsb_lstm.yaml", [], "val/nll", "poly_music"),
        ("demo/text_tiny_lstm.yaml", ["--data.path", "{text}"], "val/bpc", None),
        ("demo/generation_fsdd_scornn.yaml", [], "val/nmse", "fsdd"),
        ("demo/speech_fsdd_scornn.yaml", SPEECH_TINY, "val/mse_valid_frames", "fsdd"),
    ],
)
def test_demo_fit_records_the_main_metric(config, extra, main_metric, needs, tmp_path, monkeypatch):
    if needs and not (SHARED_DATA / needs).is_dir():
        pytest.skip(f"needs ../shared/data/{needs}")
    monkeypatch.chdir(REPO)  # demo configs give data paths relative to the repository root
    extra = [
        arg.replace("{text}", str(tiny_text(tmp_path)) if "{text}" in arg else arg).replace("{tmp}", str(tmp_path))
        for arg in extra
    ]
    db = f"sqlite:///{tmp_path / 'store.db'}"
    main(
        [
            "fit",
            "--config",
            str(REPO / "configs" / config),
            *QUICK,
            *extra,
            "--db",
            db,
            "--runs_dir",
            str(tmp_path / "runs"),
        ]
    )
    (run,) = Store(db).list_runs()
    assert run.status == "finished" and run.main_metric == main_metric
    values = [point.value for point in Store(db).metric_series(run.id, main_metric)]
    assert len(values) == 1 and values[0] == values[0]  # recorded once (after step 3), and not NaN
    assert run.best == pytest.approx(values[0])
    if "--data.cache_dir" in extra:  # computed once and saved under --runs_dir, not the folder the run started in
        cache = tmp_path / "runs" / "cache"
        assert sorted(path.name.split("-")[2] for path in cache.glob("speech-fsdd-*.pt")) == ["train", "val"]
        assert Store(db).get_run(run.id).config["data"]["init_args"]["cache_dir"] == str(cache)  # where it went
        assert not (REPO / "cache").exists()


def test_speech_demo_caches_its_features_under_runs():
    data = yaml.safe_load((REPO / "configs" / "demo" / "speech_fsdd_scornn.yaml").read_text())["data"]["init_args"]
    assert data["cache_dir"] == "cache/fsdd"  # relative: under the runs folder (place_cache), never the checkout
