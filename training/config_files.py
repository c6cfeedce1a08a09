"""Config files before Lightning reads them: each `--config FILE` checked to be a YAML mapping (one line naming the
file otherwise), and `configs/...` names resolved to the configs installed with OrthoLab from any folder."""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml

from ortholab.errors import ConfigError

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the checkout, or site-packages/ortholab: configs/ beside


def long_config_flags(argv: list[str]) -> list[str]:
    """`argv` with LightningCLI's short `-c FILE` (`-c=FILE`, `-cFILE`) written as `--config FILE`, so that every
    check of the config files given sees it: `-c` once went round `--run ID`'s refusal of a second checkpoint."""
    out = []
    for arg in argv:
        if arg == "-c":
            out.append("--config")
        elif arg.startswith("-c") and not arg.startswith("--") and len(arg) > 2:
            out.append("--config=" + arg[3:] if arg.startswith("-c=") else "--config=" + arg[2:])
        else:
            out.append(arg)
    return out


def config_arguments(argv: list[str]):
    """(index of the value in argv, whether it is `--config=VALUE`, the value) for each `--config` given."""
    for i, arg in enumerate(argv):
        key, eq, value = arg.partition("=")
        if key == "--config" and eq:
            yield i, True, value
        elif key == "--config" and i + 1 < len(argv):
            yield i + 1, False, argv[i + 1]


class UniqueKeyLoader(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        first: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden, as YAML says
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in first:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice in one mapping (first at line {first[key] + 1}), and only "
                    "the last would count; keep one",
                    key_node.start_mark,
                )
            first.setdefault(key, key_node.start_mark.line)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """`text` as YAML by the safe loader, a key given twice in one mapping refused (a yaml.YAMLError with its line)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: a !!python tag is refused, never constructed


MAX_EXPANDED_VALUES = 100_000  # a config's values with every YAML alias (*name) written out; real configs: hundreds


def check_alias_expansion(path: Path, text: str) -> None:
    """Count the values `text` holds once its aliases are expanded, from YAML's events (nothing is built), and
    refuse a document whose aliases multiply it past MAX_EXPANDED_VALUES ("billion laughs") or refer to themselves."""
    sizes: dict[str, int] = {}  # anchor -> the values its node expands to
    open_nodes: list[list] = []  # [anchor, values so far] of each collection being read
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _ in open_nodes):
                raise ConfigError(
                    f"--config {path}: the alias *{event.anchor} refers to the value that holds it (a "
                    f"value without end); write the value out instead of the alias"
                )
            count = sizes.get(event.anchor, 0)  # an undefined alias: safe_load names it next
        elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
            count = 1
            if isinstance(event, yaml.ScalarEvent) and event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionEndEvent) and open_nodes:
            anchor, count = open_nodes.pop()
            if anchor:
                sizes[anchor] = count
            if open_nodes:
                open_nodes[-1][1] += count
            continue
        else:
            continue
        total += count
        if total > MAX_EXPANDED_VALUES:
            raise ConfigError(
                f"--config {path}: its YAML aliases (*name) expand to more than {MAX_EXPANDED_VALUES:,} "
                f"values (a 'billion laughs' document), refused before expanding them; write the "
                f"values out, or use fewer aliases"
            )
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append([event.anchor, 1])
        elif open_nodes:
            open_nodes[-1][1] += count


def check_config_files(argv: list[str]) -> None:
    """Every existing `--config FILE` is UTF-8 YAML holding a mapping; else one line naming the file and the fix."""
    for _, _, value in config_arguments(argv):
        path = Path(value)
        if not path.is_file():
            if not config_file(value).is_file() and not _inline_mapping(value):  # told before the imports
                said = str(path.absolute()) if value else "''"  # an empty value is no path of this folder
                raise ConfigError(missing_config(said, not value or not path.exists()))
            continue  # an installed config's name (packaged_configs resolves it), or YAML given inline
        fix = "a config is a YAML mapping of model:, data: and trainer: (see configs/demo/copying_scornn.yaml)"
        try:
            check_alias_expansion(path, path.read_text(encoding="utf-8"))  # before anything expands the aliases
            loaded = load_yaml(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise ConfigError(f"--config {path}: not a text file (not UTF-8); {fix}") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            hint = " (YAML indents with spaces, not tabs)" if "\t" in path.read_text(encoding="utf-8") else ""
            raise ConfigError(f"--config {path}: not valid YAML{where}: {problem}{hint}") from None
        if loaded is None:
            raise ConfigError(f"--config {path}: the file is empty; {fix}")
        if not isinstance(loaded, dict):
            raise ConfigError(f"--config {path}: holds a {type(loaded).__name__}, not a mapping; {fix}")
        for section in ("model", "data", "trainer"):  # a string may name a config file or a task; a number cannot
            value = loaded.get(section)
            if value is not None and not isinstance(value, dict | str):
                raise ConfigError(
                    f"--config {path}: {section}: {value!r} is not a mapping; {section}: holds a mapping "
                    f"of its keys (see configs/demo/copying_scornn.yaml)"
                )
            if section != "data" and isinstance(value, str) and not _config_file_named(path, value):
                raise ConfigError(
                    f"--config {path}: {section}: {value!r} is neither a mapping of its keys nor a config file "
                    f"beside it; write {section}: as a mapping (see configs/demo/copying_scornn.yaml)"
                )
        _check_task_options_placed(path, loaded.get("data"))


def _check_task_options_placed(path: Path, data) -> None:
    """Beside `data: class_path:` a task's options go under `init_args:`; jsonargparse's own refusal of a key
    beside them is a page of union subtypes, or names class_path as the unknown option."""
    if not isinstance(data, dict) or "class_path" not in data:
        return
    stray = [str(key) for key in data if key not in ("class_path", "init_args")]
    if stray:
        example = f"data: {{class_path: {data['class_path']}, init_args: {{{stray[0]}: ...}}}}"
        raise ConfigError(
            f"--config {path}: data.{stray[0]} is given beside data.class_path; a task's options go under "
            f"data.init_args ({example}, as configs/demo/copying_scornn.yaml)"
        )


def _config_file_named(config: Path, name: str) -> bool:
    """Whether `name` (a section of `config` given as text) is a config file: beside `config` or from here."""
    try:
        return (config.parent / name).is_file() or Path(name).is_file()
    except OSError:  # a name too long to be a file's
        return False


def config_file(path: str) -> Path:
    """The file `--config path` reads: `path` itself where it exists, else the installed copy of a shipped config
    named as `ortholab list configs` names it (configs/demo/copying_scornn.yaml), else `path` (missing)."""
    installed = PACKAGE_ROOT / path
    if not Path(path).exists() and Path(path).parts[:1] == ("configs",) and installed.is_file():
        return installed
    return Path(path)


def _inline_mapping(value: str) -> bool:
    """`--config '{trainer: {max_steps: 5}}'`: jsonargparse reads a value that is no file as YAML."""
    try:
        return isinstance(yaml.safe_load(value), dict)
    except yaml.YAMLError:
        return False


def missing_config(path: str, missing: bool) -> str:
    """'--config PATH: no such file; did you mean configs/demo/copying_scornn.yaml? give a YAML config ...'."""
    return (
        f"--config {path}: {'no such file' if missing else 'not a file'}; {_config_meant(path)}give a YAML config "
        f"(`ortholab list configs` shows the installed ones)"
    )


def _config_meant(given: str) -> str:
    """'did you mean configs/demo/copying_scornn.yaml? ' for a mistyped config's name, else ''."""
    by_name = {p.name: str(p.relative_to(PACKAGE_ROOT)) for p in sorted((PACKAGE_ROOT / "configs").rglob("*.yaml"))}
    close = difflib.get_close_matches(Path(given).name, by_name, n=1, cutoff=0.8)
    return f"did you mean {by_name[close[0]]}? " if close else ""


def packaged_configs(argv: list[str]) -> list[str]:
    """`--config configs/demo/copying_scornn.yaml` (as `ortholab list configs` names it) from any folder: a path
    that is not a file here is read from the configs installed with OrthoLab, if it names one of them."""
    out = list(argv)
    for i, joined, path in config_arguments(argv):
        installed = config_file(path)
        if installed != Path(path):
            out[i] = f"--config={installed}" if joined else str(installed)
    return out
