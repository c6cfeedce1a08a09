"""Bad data through `ortholab fit`, as a user meets it: exit code 2, one `ortholab: error:` line naming the file
and the fix, and the runs already in the store untouched (their status and every metric point)."""

import gzip

import numpy as np
import pytest
import scipy.io
from standins import mnist_standin, write_audio, write_text_set
from test_cli import DEMO, REPO, TINY
from test_speech import timit_tree, write_sphere

from ortholab.cli.main import main
from ortholab.db import Store

DEMOS = REPO / "configs" / "demo"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A store holding one finished run, and what it held: (url, run id, status, its metric points)."""
    folder = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{folder / 'runs.db'}"
    main(["fit", "--config", DEMO, *TINY, "--db", url, "--runs_dir", str(folder / "runs")])
    store = Store(url)
    (run,) = store.list_runs()
    return url, run.id, run.status, _points(store, run.id)


def _points(store, run_id):
    return {key: [(p.step, p.value) for p in store.metric_series(run_id, key)] for key in store.metric_keys(run_id)}


def _missing_mnist(tmp_path):
    return (
        "mnist_digits_scornn.yaml",
        ["--data.dataset", "idx", "--data.path", str(tmp_path / "nowhere")],
        [str(tmp_path / "nowhere"), "download: true"],
    )


def _truncated_idx(tmp_path):
    mnist_standin(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:2000]))
    return "mnist_digits_scornn.yaml", ["--data.dataset", "idx", "--data.path", str(tmp_path)], [str(path), "truncated"]


def _mat_without_keys(tmp_path):
    path = tmp_path / "JSB_Chorales.mat"
    scipy.io.savemat(path, {"train": np.zeros((3, 88))})
    return "music_jsb_lstm.yaml", ["--data.path", str(path)], [str(path), "traindata"]


def _empty_text(tmp_path):
    write_text_set(tmp_path, "", "abc\n", "abc\n")
    return "text_tiny_lstm.yaml", ["--data.path", str(tmp_path)], [str(tmp_path / "train.txt"), "is empty"]


def _audio_rate(tmp_path):
    path = write_audio(tmp_path / "fast.flac", np.full(4000, 0.1), 16000)
    return "generation_fsdd_scornn.yaml", ["--data.path", str(path)], [str(path), "16000 Hz", "data.sample_rate"]


def _not_timit(tmp_path):
    (tmp_path / "recordings" / "DR1").mkdir(parents=True)
    write_sphere(tmp_path / "recordings" / "DR1" / "SA1.WAV")
    return (
        "speech_fsdd_scornn.yaml",
        ["--data.corpus", "timit", "--data.path", str(tmp_path / "recordings")],
        ["is not TIMIT's layout"],
    )


def _bad_sphere_header(tmp_path):
    root = timit_tree(tmp_path / "timit")
    bad = root / "TEST" / "DR1" / "FAKS0" / "SX6.WAV"
    bad.write_bytes(b"NIST_1A\n   1024\nsample_rate -i sixteen\n" + bad.read_bytes()[38:])
    return (
        "speech_fsdd_scornn.yaml",
        ["--data.corpus", "timit", "--data.path", str(root)],
        ["SX6.WAV cannot be read as audio"],
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "case",
    [_missing_mnist, _truncated_idx, _mat_without_keys, _empty_text, _audio_rate, _not_timit, _bad_sphere_header],
    ids=lambda case: case.__name__.strip("_"),
)
def test_bad_data_is_one_line_exit_2_and_keeps_what_was_recorded(case, recorded, tmp_path, monkeypatch, capsys):
    url, run_id, status, points = recorded
    config, args, expected = case(tmp_path)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "fit",
                "--config",
                str(DEMOS / config),
                "--db",
                url,
                "--runs_dir",
                str(tmp_path / "runs"),
                "--trainer.max_steps",
                "1",
                "--trainer.enable_progress_bar",
                "false",
                *args,
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("ortholab: error:")]
    assert all(part in line for part in expected), line
    store = Store(url)
    assert store.get_run(run_id).status == status and _points(store, run_id) == points
