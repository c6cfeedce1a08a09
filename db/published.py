"""The papers' published numbers (configs/papers/published/*.yaml) beside the runs that reproduce them.

A table file holds one paper table or figure: `paper`, `table`, `title`, the OrthoLab `metric` its values are
read from, `mode` (min/max: which way is better), `scale` (published = scale x OrthoLab value, e.g. 100 for
accuracies printed in %), and `rows`, each with `row` (its id), task, setting, family, hidden_size,
parameters, value (null for a qualitative row), outcome, expect (below_baseline / at_baseline), config,
args (extra command-line flags) and notes; a row may override metric, mode and scale. A run reproduces a
row when it carries the tag `paper:<table file stem>/<row>`; `ortholab reproduce` adds it. Read only: the
dashboard's Papers page and `ortholab report` both build their tables here. A qualitative row is judged
below or above the task's baseline when its run's best main metric lies more than 10% below or above it, else at
the baseline (a loss above it is worse than the baseline, not at it).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ortholab.db.lease import silence
from ortholab.db.provenance import changed_settings
from ortholab.db.records import RunSummary
from ortholab.db.seeds import SEED_TAG, SeedRun, Spread, baseline_crossing, seed_of, spread
from ortholab.db.store import Store, StoreError

PUBLISHED_DIR = Path(__file__).resolve().parents[1] / "configs" / "papers" / "published"
CHECKS_DIR = PUBLISHED_DIR.parent / "checks"  # not paper tables: the papers' claims re-checked at CPU scale
EXPECTATIONS = ("below_baseline", "above_baseline", "at_baseline")
BEYOND_BASELINE = 0.1  # a run leaves the baseline when its best main metric is 10% better than it
FLAGS_TAG = "flags:"  # `reproduce` tags a run given flags that change the experiment: 'flags:--trainer.max_steps 20'


@dataclass(frozen=True)
class PaperRow:
    table: str  # the table file's stem, e.g. scornn_table1
    row: str
    task: str
    family: str
    metric: str
    mode: str
    scale: float
    setting: str | None = None
    hidden_size: int | None = None
    parameters: int | None = None
    value: float | None = None
    outcome: str | None = None
    expect: str | None = None
    config: str | None = None
    args: tuple[str, ...] = ()  # extra `--key value` flags for the row (e.g. a shorter T than the config's)
    notes: str | None = None
    spread: float | None = None  # the paper's reported spread (e.g. a std over seeds), in the value's units

    @property
    def tolerance(self) -> float | None:
        """How far a reproduction may lie from `value` and still agree: the reported spread, else half a unit
        of the value's last printed digit (0.943 -> 0.0005: the paper's own rounding)."""
        if self.value is None:
            return None
        if self.spread is not None:
            return float(self.spread)
        text = repr(float(self.value))  # YAML's 0.943 reads back as the shortest repr, the digits as printed
        mantissa, _, exponent = text.partition("e")
        decimals = len(mantissa.partition(".")[2].rstrip("0")) - int(exponent or 0)
        return 0.5 * 10.0**-decimals

    @property
    def tag(self) -> str:
        return f"paper:{self.table}/{self.row}"


@dataclass(frozen=True)
class PaperTable:
    id: str
    paper: str
    table: str
    title: str
    metric: str
    mode: str
    scale: float
    rows: tuple[PaperRow, ...] = field(default=())


def _fail(path: Path, message: str) -> StoreError:
    return StoreError(f"{path}: {message}; fix the file (its schema is described in db/published.py)")


def load_table(path: Path) -> PaperTable:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise _fail(path, f"cannot read it as YAML ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise _fail(path, "expected a mapping with a `rows` list")
    for key in ("paper", "table", "metric", "mode"):
        if key not in data:
            raise _fail(path, f"missing key `{key}`")
    rows, seen = [], set()
    for index, raw in enumerate(data["rows"]):
        if not isinstance(raw, dict) or "row" not in raw:
            raise _fail(path, f"rows[{index}] must be a mapping with a `row` id")
        if raw["row"] in seen:
            raise _fail(path, f"row id {raw['row']!r} appears twice")
        seen.add(raw["row"])
        mode = raw.get("mode", data["mode"])
        if mode not in ("min", "max"):
            raise _fail(path, f"row {raw['row']!r}: mode {mode!r} must be min or max")
        if raw.get("expect") not in (None, *EXPECTATIONS):
            raise _fail(path, f"row {raw['row']!r}: expect {raw['expect']!r} must be one of {EXPECTATIONS}")
        known = {f for f in PaperRow.__dataclass_fields__} - {"table", "metric", "mode", "scale", "args"}
        args = raw.get("args") or []
        if not isinstance(args, list):
            raise _fail(path, f"row {raw['row']!r}: args must be a list of command-line flags")
        rows.append(
            PaperRow(
                table=path.stem,
                metric=raw.get("metric", data["metric"]),
                mode=mode,
                scale=float(raw.get("scale", data.get("scale", 1))),
                args=tuple(map(str, args)),
                **{k: v for k, v in raw.items() if k in known},
            )
        )
    return PaperTable(
        id=path.stem,
        paper=data["paper"],
        table=data["table"],
        title=data.get("title", ""),
        metric=data["metric"],
        mode=data["mode"],
        scale=float(data.get("scale", 1)),
        rows=tuple(rows),
    )


def load_tables(root: Path | None = None) -> dict[str, PaperTable]:
    """Every table file under `root` (default: the published tables, then the CPU checks), by id."""
    folders = [Path(root)] if root else [PUBLISHED_DIR, CHECKS_DIR]
    return {path.stem: load_table(path) for folder in folders for path in sorted(folder.glob("*.yaml"))}


@dataclass(frozen=True)
class Reproduction:
    """What the store holds for one row: its latest finished training run (else its latest) and, where the row's
    metric is measured on the test split, the test run of that run's checkpoint."""

    row: PaperRow
    fit: RunSummary | None
    evaluation: RunSummary | None
    value: float | None  # in the paper's units (scale applied)
    measured_as: str | None  # the metric actually read (a val/ metric when no test run exists)
    verdict: str | None  # baseline rows: below/above/at_baseline; numeric: within/above/below/not finished/not judged
    selected: float | None = None  # the test metric of the checkpoint chosen on validation, beside `value` when
    # the fit measured the test split at every validation (the papers' protocol: best test over the epochs)
    length: str | None = None  # how long the fit ran: steps of the plan, epochs
    recorded_for: str | None = None  # the runs were recorded for this other table's row of the same config
    newer: RunSummary | None = None  # a later fit of the same seed not finished (a rerun training, or stopped)
    seeds: tuple[SeedRun, ...] = ()  # per seed its latest finished fit (else latest), in seed order
    spread: Spread | None = None  # the seeds' values against the published one (db/seeds.py)
    selected_spread: Spread | None = None  # the same of the values selected on validation
    changed: str | None = None  # settings a resume of the fit changed ('KEY VALUE (was OLD) from step S')
    as_of: datetime | None = None  # when a running run's silence is measured (Store.clock: an export's moment)

    @property
    def status(self) -> str:
        if self.fit is None:
            return "not yet run"
        flags = run_flags(self.fit)
        changed = (f"; with {flags}" if flags else "") + (f"; {self.changed}" if self.changed else "")
        now = self.as_of or datetime.now(timezone.utc)
        rerun = f"; rerun {self.newer.id} {_status(self.newer, now)}" if self.newer else ""
        return _status(self.fit, now) + changed + rerun


def _changed(store: Store, fit: RunSummary) -> str | None:
    """The settings resumes of `fit` changed, each from the step it went on from (db.SQLLogger's info['resumes'])."""
    resumes = (store.get_run(fit.id).info or {}).get("resumes", [])
    said = [f"{settings} from step {r['step']}" for r in resumes if (settings := changed_settings(r))]
    return "; ".join(said) or None


def run_flags(run: RunSummary) -> str | None:
    """The flags `reproduce` was given that change the row's experiment ('--trainer.max_steps 20'), or None."""
    return next((t.removeprefix(FLAGS_TAG) for t in run.tags if t.startswith(FLAGS_TAG)), None)


def run_scale(run: RunSummary | None) -> str | None:
    """The scale `reproduce` trained the run at ('full', 'cpu-smoke'), from its `scale:` tag; None without one."""
    return next((t.removeprefix("scale:") for t in (run.tags if run else ()) if t.startswith("scale:")), None)


def at_paper_settings(run: RunSummary) -> bool:
    """Whether the run trained the row as the paper does: at full scale (or with no scale tag: a run tagged by hand)
    and with no flag that changes the experiment."""
    return run_flags(run) is None and all(t == "scale:full" for t in run.tags if t.startswith("scale:"))


def _status(run: RunSummary, now: datetime) -> str:
    """The run's status; a 'running' run that stopped writing says so ('running (silent 2.0 h: killed?)'), a failed
    one says why in the first clause of its reason ('failed (non-finite gradient of parameter group 'recurrent' at
    step 443)')."""
    quiet = silence(run.heartbeat_at, now) if run.status == "running" else None
    if run.status == "failed" and run.reason:
        quiet = run.reason.split(": ")[0].split(" (checkpoint before")[0]
    return f"{run.status} ({quiet})" if quiet else run.status


def _metric_value(store: Store, run: RunSummary, metric: str, mode: str) -> float | None:
    points = [p.value for p in store.metric_series(run.id, metric) if math.isfinite(p.value)]
    if not points:
        return None
    return min(points) if mode == "min" else max(points)


def _test_at_best_validation(store: Store, run: RunSummary, metric: str, mode: str) -> float | None:
    """Before a test run exists: the test point logged beside the first best validation point (the checkpoint
    that validation would choose, measured at the same step: on the metric's validation twin, or on the lowest
    validation loss for a fit given --select_on loss), or None."""
    chooser = metric.replace("test/", "val/", 1)
    if store.params_of([run.id])[run.id].get("select_on") == "loss":
        chooser, mode = "val/loss", "min"
    validation = [p for p in store.metric_series(run.id, chooser) if math.isfinite(p.value)]
    if not validation:
        return None
    best = (min if mode == "min" else max)(p.value for p in validation)
    step = next(p.step for p in validation if p.value == best)
    return next((p.value for p in store.metric_series(run.id, metric) if p.step == step), None)


def twins(row: PaperRow, tables: dict[str, PaperTable]) -> list[PaperRow]:
    """The other tables' rows that run the same experiment: the same config with the same flags (e.g. the LSTM of
    scoRNN's Figure 1 and of scuRNN's Figure 4), whose runs reproduce this row too."""
    return [
        other
        for table in tables.values()
        for other in table.rows
        if row.config and (other.config, other.args) == (row.config, row.args) and other.tag != row.tag
    ]


def _setting(run: RunSummary) -> tuple:
    return run_flags(run), sorted(t for t in run.tags if t.startswith("scale:"))


def _one_setting(tagged: list[RunSummary]) -> list[RunSummary]:
    """The runs at the paper's settings where any fit is; else those at the setting of the latest finished fit (else
    the latest fit): a smoke run, or one given other flags, never stands in for the paper's, nor mixes with others."""
    paper = [r for r in tagged if at_paper_settings(r)]
    fits = [r for r in tagged if r.stage == "fit"]
    if any(r.stage == "fit" for r in paper) or not fits:
        return paper
    latest = max([r for r in fits if r.status == "finished"] or fits, key=lambda r: r.id)
    return [r for r in tagged if _setting(r) == _setting(latest)]


def reproduction(store: Store, row: PaperRow, runs: list[RunSummary], same: tuple[PaperRow, ...] = ()) -> Reproduction:
    """The row's runs (those tagged with the row, else those of the first twin row in `same` that has one), those at
    the paper's settings where there are any (`at_paper_settings`): its latest finished fit, else its latest fit; a
    later unfinished fit of the same seed (a rerun) is named beside it (another seed's is one of `seeds`)."""
    for source in (row, *same):
        tagged = [r for r in runs if source.tag in r.tags]
        if any(r.stage == "fit" for r in tagged):
            break
    else:
        source, tagged = row, []
    tagged = _one_setting(tagged)
    fits = sorted((r for r in tagged if r.stage == "fit"), key=lambda r: r.id)
    finished = [r for r in fits if r.status == "finished"]
    fit = (finished or fits or [None])[-1]
    by_seed = _by_seed(store, fits)
    reruns = next((runs for runs in by_seed.values() if fit in runs), [])  # the fits of the chosen fit's seed
    newer = reruns[-1] if reruns and reruns[-1].id > fit.id else None
    after = [r.id for r in fits if fit is not None and r.id > fit.id]  # a test run belongs to the fit before it
    tests = [
        r
        for r in tagged
        if r.stage == "test"
        and r.status == "finished"
        and fit is not None
        and fit.id < r.id < min(after, default=math.inf)
    ]
    evaluation = max(tests, key=lambda r: r.id, default=None)
    value, measured_as, selected = _row_value(store, row, fit, evaluation)
    verdict = None
    if row.value is None and fit is not None and fit.best is not None and fit.baseline:
        # 10% either side of the baseline is at it; a loss above it (an accuracy below) is worse than chance
        low, high = (1 - BEYOND_BASELINE) * fit.baseline, (1 + BEYOND_BASELINE) * fit.baseline
        verdict = "below_baseline" if fit.best < low else "above_baseline" if fit.best > high else "at_baseline"
    elif row.value is not None and fit is not None:
        verdict = _numeric_verdict(row, fit, value) if at_paper_settings(fit) else _not_judged(fit)
    published = row.value if fit is None or at_paper_settings(fit) else None  # a smaller model is not the paper's
    seeds = _seed_runs(store, row, tagged, by_seed, fit, evaluation)
    return Reproduction(
        row,
        fit,
        evaluation,
        value,
        measured_as,
        verdict,
        selected,
        _length(store, fit) if fit is not None else None,
        None if source is row else source.tag.removeprefix("paper:"),
        newer,
        seeds,
        spread([s.value for s in ended], published) if (ended := _ended(seeds)) else None,
        spread([s.selected for s in ended], published) if ended else None,
        _changed(store, fit) if fit is not None else None,
        store.clock(),
    )


UNFINISHED = ("running", "interrupted")  # a fit still training, or stopped before its end to be continued


def _ended(seeds: list[SeedRun]) -> list[SeedRun]:
    """The seeds whose runs ended: a running or interrupted seed's value is partial, so the spread leaves it out
    (the export draws it thin, outside the band, and the report counts it as still training or stopped)."""
    return [s for s in seeds if s.fit.status not in UNFINISHED]


def _row_value(
    store: Store, row: PaperRow, fit: RunSummary | None, evaluation: RunSummary | None
) -> tuple[float | None, str | None, float | None]:
    """(value in the paper's units, the metric it was read from, the value selected on validation): the fit's own
    test points first (measured at every validation, as the papers did), then the test run of the checkpoint
    chosen on validation, then the validation metric when nothing was measured on the test split."""
    for run, metric in ((fit, row.metric), (evaluation, row.metric), (fit, row.metric.replace("test/", "val/", 1))):
        if run is not None and (found := _metric_value(store, run, metric, row.mode)) is not None:
            selected = None
            if run is fit and metric.startswith("test/"):
                found_selected = (
                    _metric_value(store, evaluation, metric, row.mode)
                    if evaluation is not None
                    else _test_at_best_validation(store, fit, metric, row.mode)
                )
                selected = None if found_selected is None else found_selected * row.scale
            return found * row.scale, metric, selected
    return None, None, None


def _by_seed(store: Store, fits: list[RunSummary]) -> dict[int | None, list[RunSummary]]:
    """The fits grouped by their seed (its tag, else its recorded seed_everything), each group in id order."""
    params = store.params_of([r.id for r in fits if not any(t.startswith(SEED_TAG) for t in r.tags)]) if fits else {}
    groups: dict[int | None, list[RunSummary]] = {}
    for run in fits:
        groups.setdefault(seed_of(run, params.get(run.id, {})), []).append(run)
    return groups


def _seed_runs(
    store: Store,
    row: PaperRow,
    tagged: list[RunSummary],
    groups: dict[int | None, list[RunSummary]],
    fit: RunSummary | None,
    evaluation: RunSummary | None,
) -> tuple[SeedRun, ...]:
    """Per seed of the row's fits (`groups`, from _by_seed), its latest finished fit (else its latest) with its
    value; its test run is the latest finished one tagged with the same seed after it (for the row's chosen fit:
    `evaluation`)."""
    out = []
    for seed, runs in sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)):
        chosen = ([r for r in runs if r.status == "finished"] or runs)[-1]
        if chosen is fit:
            test = evaluation
        else:
            tests = [
                r
                for r in tagged
                if r.stage == "test" and r.status == "finished" and r.id > chosen.id and f"{SEED_TAG}{seed}" in r.tags
            ]
            test = max(tests, key=lambda r: r.id, default=None)
        value, _, selected = _row_value(store, row, chosen, test)
        crossed, beyond = baseline_crossing(store, chosen, BEYOND_BASELINE) if row.value is None else (None, None)
        out.append(SeedRun(seed, chosen, test, value, selected, crossed, beyond))
    return tuple(out)


def _not_judged(fit: RunSummary) -> str:
    """The verdict of a numeric row whose runs are not the paper's experiment (reproduce's flags changed it, or a
    smoke scale): their value is shown, never judged against the paper's ('below by 737 sd' of an n = 16 model)."""
    scale = run_scale(fit)
    return "not judged (with flags)" if run_flags(fit) is not None else f"not judged ({scale} scale)"


def _numeric_verdict(row: PaperRow, fit: RunSummary, value: float | None) -> str:
    """within / above / below the published value (by its spread or printed precision), or not finished."""
    if fit.status != "finished" or value is None:
        return "not finished"
    if abs(value - row.value) <= row.tolerance:
        return "within"
    return "above" if value > row.value else "below"


def _length(store: Store, fit: RunSummary) -> str:
    """'3300/77000 steps, epoch 3/70' from the run's recorded plan; the steps alone for runs without one."""
    plan = store.run_plan(fit.id)
    total, per_epoch, epochs = plan.get("total_steps"), plan.get("steps_per_epoch"), plan.get("max_epochs")
    steps = fit.steps  # the highest step recorded, as `ortholab runs` shows it
    text = f"{steps}/{total} steps" if total else f"{steps} steps"
    if per_epoch and epochs:
        text += f", epoch {steps // per_epoch}/{epochs}"
    return text


def reproductions(
    store: Store | None, table: PaperTable, tables: dict[str, PaperTable] | None = None
) -> list[Reproduction]:
    """One Reproduction per row of `table` (all 'not yet run' without a store); a row without runs of its own
    shows those of a twin row in `tables` (default: every table, `load_tables()`)."""
    if store is None:
        return [Reproduction(row, None, None, None, None, None) for row in table.rows]
    runs = store.list_runs()
    tables = load_tables() if tables is None else tables
    return [reproduction(store, row, runs, tuple(twins(row, tables))) for row in table.rows]


def _one_seed_against_baseline(seed: SeedRun) -> str:
    """A baseline row's one judged seed in words, instead of a share of one."""
    if seed.crossed_at is None:
        return "1 seed: never beyond the baseline"
    if seed.ends_beyond:
        return f"1 seed: first beyond the baseline at step {seed.crossed_at}, beyond it at the end"
    return f"1 seed: first beyond the baseline at step {seed.crossed_at}, not beyond it at the end"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def is_marked(item: Reproduction) -> bool:
    """Whether a baseline row's reproduction gets ✓ or ✗ against the paper's curve: a run at the paper's settings,
    judged and ended; a cpu-smoke run shows that the row runs, not the paper's result, and a run still training or
    stopped to be continued is judged when it ends (a uRNN sits at the baseline for thousands of steps)."""
    judged = bool(item.verdict and item.row.value is None and item.row.expect)
    return judged and run_scale(item.fit) != "cpu-smoke" and item.fit.status not in UNFINISHED


def comparison_rows(items: list[Reproduction]) -> list[dict[str, Any]]:
    """The report's columns, one dict per row (the dashboard and `ortholab report` show the same)."""
    rows = []
    for item in items:
        row = item.row
        published = _number(row.value) if row.value is not None else (row.outcome or "-")
        # with several seeds the value is one seed's (the latest finished fit's): named, the spread is under seeds
        seed = next((f"seed {s.seed}" for s in item.seeds if s.fit is item.fit), None) if len(item.seeds) > 1 else None
        if item.fit is None:
            reproduced = "not yet run"
        elif row.value is None and item.verdict:
            shown = (item.measured_as, item.value) if item.value is not None else (item.fit.main_metric, item.fit.best)
            said = ", ".join([f"{shown[0]} {_number(shown[1])}"] + [seed] * bool(seed))
            reproduced = f"{item.verdict.replace('_', ' ')} ({said})"
            if is_marked(item):
                whose = "expected" if unreported(row) else "paper"  # the 2026 comparison's rows: no paper's claim
                reproduced += " ✓" if item.verdict == row.expect else f" ✗ ({whose}: {row.expect.replace('_', ' ')})"
        else:
            reproduced = _number(item.value)
            said = [item.measured_as] * bool(item.measured_as and item.measured_as != row.metric) + [seed] * bool(seed)
            if said:
                reproduced += f" ({', '.join(said)})"
        scale = run_scale(item.fit)
        rows.append(
            {
                "row": row.row,
                "setting": row.setting,
                "family": row.family,
                "n": row.hidden_size,
                "params": row.parameters,
                "published": published,
                "reproduced": reproduced,
                "seeds": seeds_text(item),
                "selected_on_val": _number(item.selected) if item.selected is not None else None,
                "length": item.length,
                "verdict": item.verdict if row.value is not None else None,
                "status": item.status,
                "scale": scale,
                "run": item.fit.id if item.fit else None,
                "seed_runs": tuple(s.fit.id for s in item.seeds),  # each seed's chosen fit (the dashboard links all)
                "recorded_for": item.recorded_for,
                "test_run": item.evaluation.id if item.evaluation else None,
                "config": row.config,
            }
        )
    return rows


def unreported(row: PaperRow) -> bool:
    """A row no paper reports (the 2026 comparison's): its `expect` is the comparison's hypothesis, not a claim."""
    return row.value is None and (row.outcome or "").startswith("not reported")


def seeds_text(item: Reproduction) -> str | None:
    """'1 seed'; '3 seeds: 0.9412 ± 0.0021 (0.939–0.944), within' (then '; chosen on validation: ...', the same of the
    values at the checkpoints chosen on validation, where the seeds have them); for a baseline row '2/3 seeds
    end beyond the baseline (first beyond at steps 1200, 3400, -)' or, with one seed, '1 seed: first beyond the
    baseline at step 1200, beyond it at the end'; seeds still training or stopped are counted, with the step
    each unfinished one first went beyond the baseline where one did ('1 seed; 1 still training; so far first
    beyond the baseline at step 4600')."""
    seeds = item.seeds
    if not seeds:
        return None
    n, ended = len(seeds), _ended(seeds)
    running = sum(s.fit.status == "running" for s in seeds)
    stopped = sum(s.fit.status == "interrupted" for s in seeds)
    training = (f"; {running} still training" if running else "") + (
        f"; {stopped} stopped before its end" if stopped else ""
    )
    if item.row.value is None:  # judged against the baseline
        unfinished = [s for s in seeds if s.fit.status in UNFINISHED]
        if any(s.crossed_at is not None for s in unfinished):  # a crossing is a fact, whatever the run does next
            steps = ", ".join("-" if s.crossed_at is None else str(s.crossed_at) for s in unfinished)
            training += f"; so far first beyond the baseline at step{'s' * (len(unfinished) > 1)} {steps}"
        judged = [s for s in ended if s.ends_beyond is not None]
        if not judged:
            return f"{n} seed{'s' * (n > 1)}" + training
        if len(judged) == 1:
            return _one_seed_against_baseline(judged[0]) + training
        steps = ", ".join("-" if s.crossed_at is None else str(s.crossed_at) for s in judged)
        when = f"first beyond at steps {steps}" if any(s.crossed_at is not None for s in judged) else "none ever was"
        spread = item.spread  # the best value of the seeds that ended, as for a row with a published number
        values = (
            f"; best {item.measured_as or item.fit.main_metric} {_number(spread.mean)} ± {spread.std:.2g} "
            f"({_number(spread.low)}–{_number(spread.high)})"
            if spread is not None and spread.n > 1 and spread.std is not None
            else ""
        )
        return (
            f"{sum(bool(s.ends_beyond) for s in judged)}/{len(judged)} seeds end beyond the baseline ({when})"
            + values
            + training
        )
    spread = item.spread
    if spread is None or spread.n == 0:
        return f"{n} seed{'s' * (n > 1)}, none measured" + training
    if spread.n == 1:
        return "1 seed" + training
    return f"{spread.n} seeds: {_spread_text(spread)}" + _selected_text(item.selected_spread) + training


def _spread_text(spread: Spread) -> str:
    """'0.9446 ± 0.00089 (0.9439–0.9456), above by 1.8 sd' (no verdict for runs not at the paper's setup)."""
    judged = f", {spread.verdict}" if spread.verdict else ""
    return f"{_number(spread.mean)} ± {spread.std:.2g} ({_number(spread.low)}–{_number(spread.high)}){judged}"


def _selected_text(selected: Spread | None) -> str:
    """The same aggregate of the seeds' test values at the checkpoints chosen on validation, where each seed has
    one (its fit measured the test split at every validation); empty otherwise."""
    if selected is None or selected.n < 2 or selected.std is None:
        return ""
    return f"; chosen on validation: {_spread_text(selected)}"


REPORT_COLUMNS = [
    "row",
    "setting",
    "family",
    "n",
    "params",
    "published",
    "reproduced",
    "seeds",
    "selected_on_val",
    "length",
    "verdict",
    "status",
    "scale",
    "run",
    "recorded_for",
]


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, its last one an ellipsis where it was cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def shrink_to_fit(
    widths: list[int],
    room: int,
    first: tuple[int, ...] = (),
    keep: tuple[int, ...] = (),
    least: int = 8,
    first_least: int = 8,
) -> list[int]:
    """Column widths summing to at most `room` where they can: the columns in `first` are cut first, in order, to no
    fewer than `first_least` characters, then again to no fewer than `least`, then the widest one at a time, none
    below `least` characters; the columns in `keep` (ids to type back) never."""
    widths = list(widths)
    for floor in (first_least, least):  # the `first` columns to `first_least` each, then (still over) to `least`
        for i in first:
            if (over := sum(widths) - room) > 0:
                widths[i] = max(min(widths[i], floor), widths[i] - over)
    cut = [i for i in range(len(widths)) if i not in keep]
    while cut and (over := sum(widths) - room) > 0:
        widest = max(cut, key=lambda i: widths[i])
        if widths[widest] <= least:
            break
        runner_up = max((widths[i] for i in cut if i != widest), default=least)
        widths[widest] = (
            max(least, runner_up, widths[widest] - over) if widths[widest] > runner_up else widths[widest] - 1
        )
    return widths


CUT_FIRST = ("published", "seeds")  # in this order, before the widest column
WIDE_ONLY = ("params", "recorded_for")  # left out of a terminal's report (--wide shows them)
REPRODUCED_WIDTH = 40  # a terminal's reproduced cell: its value and verdict (below baseline (val/loss 0.0001936) ✓)
FIRST_CUT_LEAST = 20  # the CUT_FIRST columns are cut first, to no fewer characters than this, then to `least`


def _terse_lengths(cells: list[str]) -> tuple[str, list[str]]:
    """A terminal's length column, never cut: '20000/20000' under the header 'steps' where every row counts steps
    alone; else each epoch-bounded row as 'epoch 3/70' (its steps are in --wide)."""
    if all(cell == "-" or (cell.endswith(" steps") and "," not in cell) for cell in cells):
        return "steps", [cell.removesuffix(" steps") for cell in cells]
    return "length", [cell[cell.index("epoch ") :] if ", epoch " in cell else cell for cell in cells]


def _terse(reproduced: str, metric: str) -> str:
    """A terminal's reproduced cell without what the lines above say: 'above baseline (0.303) ✗ (paper: below)' for
    'above baseline (val/loss 0.303) ✗ (paper: below baseline)' under 'metric: `val/loss`'."""
    return reproduced.replace(f"({metric} ", "(").replace(" baseline)", ")")


def _markdown_line(cells: list[str], widths: list[int] | None = None) -> str:
    """One Markdown table line; with `widths` (a terminal), each cell cut to its column's width and padded to it, so
    that the columns line up."""
    if widths is not None:
        cells = [clip(cell, w).ljust(w) for cell, w in zip(cells, widths)]
    return "| " + " | ".join(cells) + " |"


def _column_widths(
    lines: list[list[str]],
    width: int,
    first: tuple[int, ...] = (),
    keep: tuple[int, ...] = (),
    last: tuple[int, ...] = (),
) -> list[int]:
    """One width per column for every line of a table (its header and rows) to fit `width` characters: each column
    as wide as its widest cell, then those in `first` cut first, those in `last` only when the others are at their
    least, those in `keep` never."""
    room = width - 4 - 3 * (len(lines[0]) - 1)  # "| " and " |" around, " | " between
    widest = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    widths = shrink_to_fit(widest, room, first, keep + last, first_least=FIRST_CUT_LEAST)
    return shrink_to_fit(widths, room, (), keep)


# columns a terminal's report states once above the table when every row has the same value in them
LIFTABLE = ("setting", "family", "n", "params", "seeds", "length", "verdict", "status", "scale", "recorded_for")


def _same(rows: list[dict], column: str) -> bool:
    return len({str(row[column]) for row in rows}) == 1


def _squeezed(text: str) -> str:
    return "".join(ch for ch in str(text) if ch not in " =-_")


def _named_by_row_id(rows: list[dict], column: str) -> bool:
    """Whether every row's id already says the column's value (adding-T200_scurnn_n116: setting T=200, family
    scurnn, n 116), so that a terminal's report can leave the column out."""
    spelled = {"family": lambda v: str(v), "n": lambda v: f"n{v}", "setting": _squeezed}.get(column)
    return spelled is not None and all(
        row[column] in (None, "-") or spelled(row[column]) in _squeezed(row["row"]) for row in rows
    )


def markdown_report(
    store: Store | None,
    tables: dict[str, PaperTable],
    found: dict[str, list[Reproduction]] | None = None,
    recorded_only: bool = False,
    width: int | None = None,
) -> str:
    """Published vs reproduced, one Markdown table per paper table (`found`: their reproductions, if read already).
    `recorded_only`: only the rows with a run (a table without one is left out, a last line counts the others);
    `width`: lines fit it (a terminal: columns empty in every row, named by the row ids or in WIDE_ONLY left out,
    those of one value in every row said once above the table, the published text cut first, with …)."""
    out, hidden, total = [], 0, 0
    if found is None:
        every = load_tables()  # where twin rows are looked up, read once
        found = {table.id: reproductions(store, table, every) for table in tables.values()}
    for table in tables.values():
        rows = comparison_rows(found[table.id])
        total += len(rows)
        if recorded_only:
            rows = [row for row in rows if row["run"] is not None]
            hidden += len(found[table.id]) - len(rows)
            if not rows:
                continue
        columns, shared = REPORT_COLUMNS, {}
        if width is not None:  # a terminal: columns empty in every row left out, those of one value said once above
            columns = [c for c in REPORT_COLUMNS if c == "row" or any(row[c] not in (None, "-") for row in rows)]
            shared = {c: rows[0][c] for c in columns if c in LIFTABLE and len(rows) > 1 and _same(rows, c)}
            columns = [c for c in columns if c not in shared and c not in WIDE_ONLY and not _named_by_row_id(rows, c)]
        first = tuple(columns.index(c) for c in CUT_FIRST if c in columns)
        kept = ("row", "run", "length") if width is not None else ()  # ids a user types back; counts cut are unread
        keep = tuple(columns.index(c) for c in kept if c in columns)
        last = tuple(columns.index(c) for c in ("reproduced",) if c in columns)  # (its text cut to REPRODUCED_WIDTH)
        title = f"### {table.id}: {table.paper} {table.table}, {table.title}"  # the id `report TABLE` takes
        out.append((title if width is None else clip(title, width)) + "\n")
        scale = f", published = {table.scale:g} x OrthoLab value" if table.scale != 1 else ""
        own = sorted(
            {
                f"`{row.metric}` ({row.mode})"
                for row in table.rows
                if (row.metric, row.mode) != (table.metric, table.mode)
            }
        )
        others = f"; rows with their own: {', '.join(own)}" if own else ""  # (cpu_checks' music rows: test/nll)
        out.append(f"metric: `{table.metric}` ({table.mode}){scale}{others}\n")
        if any(seed.ends_beyond is not None for item in found[table.id] for seed in item.seeds):  # what it means
            out.append(f"beyond the baseline: at a validation, {BEYOND_BASELINE:.0%} or more better than it\n")
        if any(is_marked(i) for i in found[table.id]):  # a ✓ or ✗ is shown
            marks = (
                "✓ / ✗: the best validation against the baseline agrees / disagrees with the paper's curve; no mark "
                "where the paper gives no state to judge (the row's notes say why), nor before the run ends"
            )
            if any(is_marked(i) and unreported(i.row) for i in found[table.id]):
                marks += "; a row no paper reports is marked against the expectation its published cell states"
            out.append((textwrap.fill(marks, width, break_on_hyphens=False) if width else marks) + "\n")
        if shared:
            every = "every row: " + " · ".join(f"{c} {v}" for c, v in shared.items())
            out.append(textwrap.fill(every, width, break_on_hyphens=False) + "\n")
        lines = [list(columns)]
        for row in rows:
            cells = ["-" if row[c] is None else str(row[c]) for c in columns]
            if width is not None and "reproduced" in columns:
                reproduced = _terse(cells[columns.index("reproduced")], table.metric)
                cells[columns.index("reproduced")] = clip(reproduced, REPRODUCED_WIDTH)
            lines.append(cells)
        if width is not None and "length" in columns:
            at = columns.index("length")
            lines[0][at], lengths = _terse_lengths([cells[at] for cells in lines[1:]])
            for cells, length in zip(lines[1:], lengths):
                cells[at] = length
        widths = _column_widths(lines, width, first, keep, last) if width is not None else None
        rule = "|" + "---|" * len(columns) if widths is None else "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        out += [_markdown_line(lines[0], widths), rule, *(_markdown_line(cells, widths) for cells in lines[1:]), ""]
    if hidden:
        out.append(f"{hidden} of {total} rows not yet run are not shown (--all shows every row)")
    if hidden and hidden == total:  # a new store (after the demo): where rows come from, and runs to read now
        where = (
            "A row fills in once `ortholab reproduce TABLE` trains it (`--scale cpu-smoke`: 40 steps a row, to see "
            "each one run); the runs behind the README's results come with a checkout: `ortholab report TABLE --db "
            "docs/results/DIR/runs.db` (`ortholab reproduce --list` names the tables)"
        )
        out.append(textwrap.fill(where, width, break_on_hyphens=False) if width else where)
    return "\n".join(out)
