"""Every numerical tolerance in the tests is derived (tests/tolerances.py: c · n · eps · scale), none is tuned.

A source scan of tests/*.py. It flags a literal number used as a tolerance:
- a tolerance keyword (rtol, atol, abs, rel) of any call given a literal (arithmetic of literals included) that is
  not zero, or an expression holding a literal below 1e-2 (`atol=1e-12`, `atol=1 / 32768 + 1e-6`);
- a literal below 1e-2 in the upper bound of a comparison (`err < 1e-12`, `x <= 0.5 + 1e-12`);
- a literal below 1e-2 assigned, looped over or parametrized under a tolerance's name (`tol`, `rel`, `bound`...),
  or the default of a function's `rtol`/`atol`.
Literals inside a call of tests/tolerances.py's functions are its arguments, not bounds. Allowed without comment:
exact zeros (rtol=0, atol=0: bit-identical claims) and the 16-bit audio quantisation step 1/32768 (1/32767: the
positive full scale), both derived already. ALLOWED lists the tolerances that are not round-off, each with why.
A new bound is written as `roundoff(dtype, n=..., scale=...)` or `**close(...)` with a comment giving n and scale.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TOLERANCE_KEYWORDS = {"rtol", "atol", "abs", "rel"}
TOLERANCE_NAME = re.compile(r"^(r|a)?tol$|_tol$|^tol_|^rel$|^bound$|_bound$")
DERIVED = {"roundoff", "close", "eps", "norm", "cond"}  # tests/tolerances.py
SMALL = 1e-2  # below this a literal is a round-off-sized bound
QUANTISATION = (1 / 32768, 1 / 32767)

# (file, text on the flagged line, why it is not a round-off bound). Learning thresholds need no entry: they
# compare a loss with a baseline, with no small literal.
ALLOWED = [
    # sampling error of a random initialisation or draw: a few standard errors of the statistic
    ("test_exprnn.py", "pytest.approx(math.pi / 4, abs=0.1)", "mean of 200 U(0, pi/2) draws: se 0.032, 3 se"),
    ("test_exprnn.py", "rel=0.05)", "std of 6,000 Gaussian draws: relative se 1/sqrt(2 N) = 0.009, 5.5 se"),
    ("test_nnrnn.py", "pytest.approx(math.pi, abs=0.3)", "mean of 200 U(0, 2 pi) draws: se 0.13, 2.3 se"),
    ("test_nnrnn.py", "rel=0.05)", "std of 12,000 Gaussian draws: relative se 0.0065, 7.7 se"),
    ("test_timing_memory.py", "rel=0.05)", "resident memory against the allocation: the allocator's pages"),
    (
        "test_tasks.py",
        "abs=0.006)",
        "a sample mean of the adding task's loss: a few standard errors; 1/6 quoted to 4 places",
    ),
    # a constant quoted to k digits: one unit in its last place
    ("test_tasks.py", "pytest.approx(0.17329, abs=1e-5)", "quoted to 5 places"),
    (
        "test_reproduce.py",
        "abs=0.006)",
        "hours of a plan under 1 h printed to 3 significant digits (under 0.005) from a step printed to 3 places "
        "(at most 80 x 0.0005 s / 3600 more): the printout's rounding, not arithmetic",
    ),
    (
        "test_reproduce.py",
        "abs=40 * 0.0005 / 3600 + 0.005 * hours)",
        "hours printed to 3 significant digits (half a unit: 0.5 %) from a step printed to a millisecond "
        "(40 x 0.0005 s / 3600 more), the two added: the printout's rounding, not arithmetic",
    ),
    (
        "test_reproduce.py",
        "3 * (hours + float(epochs[-1])), rel=0.01)",
        "a total and the rows' hours it sums, each printed to 3 significant digits (half a unit: 0.5 %), the two "
        "added: the printout's rounding, not arithmetic",
    ),
    ("test_cli.py", "pytest.approx(10 * 2.0794415 / 25, rel=1e-6)", "ln 8 quoted to 8 digits"),
    ("test_optimizers.py", "pytest.approx(0.9480124755, abs=1e-9)", "quoted to 10 places"),
    ("test_optimizers.py", "pytest.approx(0.915484575, abs=1e-9)", "quoted to 9 places"),
    ("test_audio_eval.py", "pytest.approx(4.549, abs=0.01)", "MOS-LQO's maximum quoted to 3 places"),
    # estimates of a signal-processing quantity: their own accuracy, in dB or STOI units
    ("test_audio_eval.py", "pytest.approx(snr_db, abs=0.05)", "segmental SNR's second-order frame spread, x10"),
    ("test_audio_eval.py", "pytest.approx(20.0, abs=0.6)", "segmental SNR over the sounding frames"),
    ("test_audio_eval.py", "pytest.approx(power_db, abs=0.5)", "P.56 active level of a tone"),
    ("test_audio_eval.py", "abs=0.3)", "P.56 active level of a gated tone"),
    # not round-off: a Taylor remainder, a descent condition, an optimisation's convergence
    (
        "test_fcurnn.py",
        "for lr, rel in [(1e-6, 1e-4), (1e-7, 1e-5)]",
        "the slope's Taylor remainder lr L''/2L' shrinks with lr",
    ),
    ("test_fcurnn.py", "before.item() + 0.5e-3 * predicted_slope", "Armijo's sufficient-decrease constant"),
    ("test_ornn.py", "(w - q).norm() < 1e-3", "400 Adam steps towards a target: a learning threshold"),
]


def _number(node: ast.AST) -> float | None:
    """The value of a literal or of arithmetic on literals only; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.BinOp):
        left, right = _number(node.left), _number(node.right)
        if left is None or right is None:
            return None
        try:
            return float(eval(compile(ast.Expression(node), "<literal>", "eval")))  # literals only
        except ZeroDivisionError:
            return None
    return None


def _small_literals(node: ast.AST) -> list[float]:
    """Literals 0 < |v| < SMALL in an expression, outside calls of tests/tolerances.py."""
    if isinstance(node, ast.Call) and _name(node.func) in DERIVED:
        return []
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return [node.value] if 0 < abs(node.value) < SMALL else []
    return [v for child in ast.iter_child_nodes(node) for v in _small_literals(child)]


def _name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_quantisation(value: float | None) -> bool:
    return value is not None and any(abs(value - q) < 1e-15 for q in QUANTISATION)


def _targets(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def bare_tolerances(path: Path) -> list[tuple[int, str]]:
    """(line, source line) of each bare tolerance literal in one file."""
    source = path.read_text()
    lines = source.splitlines()
    found: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in TOLERANCE_KEYWORDS:
                    value = _number(kw.value)
                    bare = value is not None and value != 0 and not _is_quantisation(value)
                    if bare or (value is None and _small_literals(kw.value)):
                        found.add(kw.value.lineno)
            if _name(node.func) == "parametrize" and node.args and isinstance(node.args[0], ast.Constant):
                names = [n.strip() for n in str(node.args[0].value).split(",")]
                tolerances = len(node.args) > 1 and _small_literals(node.args[1])
                if any(TOLERANCE_NAME.search(n) for n in names) and tolerances:
                    found.add(node.lineno)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                upper = (
                    operands[i + 1]
                    if isinstance(op, (ast.Lt, ast.LtE))
                    else operands[i]
                    if isinstance(op, (ast.Gt, ast.GtE))
                    else None
                )
                value = _number(upper)
                negative = value is not None and value < 0  # `slope < -1e-3`: a sign, not a tolerance
                if upper is not None and _small_literals(upper) and not negative and not _is_quantisation(value):
                    found.add(upper.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.For)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.iter if isinstance(node, ast.For) else node.value
            if (
                value is not None
                and any(TOLERANCE_NAME.search(t) for tg in targets for t in _targets(tg))
                and _small_literals(value)
            ):
                found.add(node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args[len(node.args.args) - len(node.args.defaults) :]
            for arg, default in [*zip(args, node.args.defaults), *zip(node.args.kwonlyargs, node.args.kw_defaults)]:
                if default is not None and arg.arg in {"rtol", "atol"} and _number(default) not in (None, 0.0):
                    found.add(default.lineno)
    return [(line, lines[line - 1].strip()) for line in sorted(found)]


def _allowed(path: Path, text: str) -> bool:
    return any(path.name == name and fragment in text for name, fragment, _ in ALLOWED)


def test_no_bare_tolerance_literals():
    offenders = [
        f"{path.name}:{line}: {text}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name not in {"tolerances.py", "test_tolerances.py"}
        for line, text in bare_tolerances(path)
        if not _allowed(path, text)
    ]
    assert not offenders, (
        "tolerance literals not derived from tests/tolerances.py (write c · n · eps · scale with "
        "roundoff/close and a comment giving n and scale, or add a non-round-off bound to "
        "ALLOWED with its reason):\n" + "\n".join(offenders)
    )


def test_every_allowed_entry_still_matches_a_line():
    unused = [
        (name, fragment)
        for name, fragment, _ in ALLOWED
        if not any(fragment in text for _, text in bare_tolerances(TESTS / name))
    ]
    assert not unused, f"ALLOWED entries that match nothing any more (remove them): {unused}"


def test_the_scan_finds_what_it_should():
    import tempfile
    import textwrap

    sample = textwrap.dedent("""
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, b, **close(F64, n=9, scale=norm(b)))
        assert err < 1e-12
        assert err < roundoff(F64, n=64, scale=2.0)
        assert np.allclose(x, y, atol=1 / 32768)
        assert np.allclose(x, y, atol=1 / 32768 + 1e-6)
        assert count > 1e-3
        assert x <= 0.5 + 1e-12
        @pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5)])
        def f(x, rtol=1e-6): pass
        """)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test_sample.py"
        path.write_text(sample)
        assert [line for line, _ in bare_tolerances(path)] == [2, 5, 8, 10, 11, 12]
