"""`ortholab docs [PAGE[#SECTION]]`: the documentation's Markdown pages in the terminal, from a checkout's docs/ or
the copy a wheel carries, with the parts read from the code (option tables, --help texts) filled in and the API
reference's `::: name` entries printed as signatures and docstrings. The program's
messages point at pages as `docs/troubleshooting.md#exit-codes`; that text, given as PAGE, prints that section."""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
import unicodedata
from pathlib import Path

from ortholab.errors import ConfigError

USAGE = "docs [PAGE[#SECTION]] [--path]"
HELP = "the documentation's pages in the terminal (no PAGE: the list of pages)"
PACKAGE = Path(__file__).resolve().parents[1]
FOLDERS = (PACKAGE / "docs", PACKAGE.parent / "docs")  # a wheel's copy (pyproject's ortholab.docs), a checkout's
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
API = re.compile(r"^::: ([\w.]+)\s*$")  # mkdocstrings' directive: the site renders the object's docstrings there


def add_arguments(parser) -> None:
    parser.add_argument(
        "page",
        nargs="?",
        default=None,
        help="a page (troubleshooting, families/scornn, or a family's name), as messages name them "
        "(docs/configs.md#a-family-of-your-own: that section only)",
    )
    parser.add_argument("--path", action="store_true", help="print the page's file path instead of its text")


def pages_folder() -> Path:
    """The folder the pages are read from: the installed copy, else the checkout's docs/."""
    for folder in FOLDERS:
        if (folder / "index.md").is_file():
            return folder
    raise ConfigError("no documentation pages here: this install carries none (reinstall ortholab from its wheel)")


def pages(folder: Path) -> dict[str, Path]:
    """Page name (path under docs/ without .md: 'getting-started', 'families/scornn') -> its file."""
    found = [*folder.glob("*.md"), *folder.glob("families/*.md")]
    return {path.relative_to(folder).with_suffix("").as_posix(): path for path in sorted(found)}


def title(path: Path) -> str:
    """The page's first '# ' heading."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next((line[2:].strip() for line in lines if line.startswith("# ")), "")


def slug(heading: str) -> str:
    """The anchor MkDocs gives (Python-Markdown's toc slugify): 'A task of your own' -> 'a-task-of-your-own'."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def headings(markdown: str) -> list[tuple[int, int, str]]:
    """(line index, level, slug) of each heading outside code fences."""
    found, fenced = [], False
    for index, line in enumerate(markdown.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((index, len(match.group(1)), slug(match.group(2))))
    return found


def section(markdown: str, anchor: str, name: str) -> str:
    """The section under the heading whose anchor is `anchor`, up to the next heading of its level or above."""
    lines, marks = markdown.splitlines(), headings(markdown)
    for position, (index, level, found) in enumerate(marks):
        if found == anchor:
            end = next((i for i, lvl, _ in marks[position + 1 :] if lvl <= level), len(lines))
            return "\n".join(lines[index:end]).rstrip() + "\n"
    anchors = [s for _, level, s in marks if level > 1]
    near = difflib.get_close_matches(anchor, anchors, n=3)
    if near:
        hint = f"did you mean {', '.join('#' + s for s in near)}?"
    elif anchors:
        hint = f"its sections: #{', #'.join(anchors[:8])}"
    else:
        hint = f"it has no sections: `ortholab docs {name}` prints it whole"
    raise ConfigError(f"page {name} has no section #{anchor}; {hint}")


def resolve(text: str, known: dict[str, Path]) -> tuple[str, str | None]:
    """(page name, section anchor or None) from what a user or a message gives: 'docs/tasks.md#a-task-of-your-own',
    'tasks', 'families/scornn.md' or a family's name."""
    page, _, anchor = text.partition("#")
    page = page.strip().removeprefix("./").removeprefix("docs/").removesuffix(".md").strip("/") or "index"
    if page not in known and f"families/{page}" in known:
        page = f"families/{page}"
    if page not in known and f"{page}/index" in known:  # a folder: its index page ('families')
        page = f"{page}/index"
    if page not in known:
        near = difflib.get_close_matches(page, list(known), n=3)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ConfigError(f"no documentation page {text!r}; {hint}`ortholab docs` lists the pages")
    return page, anchor or None


def _documented(name: str, obj, level: int) -> str:
    """One object's heading, signature and docstring, as Markdown."""
    try:
        signature = str(inspect.signature(obj)) if callable(obj) else ""
    except (TypeError, ValueError):  # a builtin without one
        signature = ""
    doc = inspect.getdoc(obj) or "(no docstring)"
    return f"{'#' * level} `{name}{signature}`\n\n{doc}\n"


def api_reference(dotted: str, members: list[str] | None = None) -> str:
    """What the site's `::: dotted` shows, for the terminal: the object's signature and docstring; a class's public
    methods and a module's public functions (or `members`) under it. A name that does not import says so."""
    module_name, obj = dotted, None
    while module_name:
        try:
            obj = importlib.import_module(module_name)
            break
        except ImportError:
            module_name = module_name.rpartition(".")[0]
    try:
        for attribute in dotted[len(module_name) :].split(".")[1:] if obj is not None else []:
            obj = getattr(obj, attribute)
    except AttributeError:
        obj = None
    if obj is None:
        return f"### `{dotted}`\n\n(not importable here: `python -c 'help({dotted})'` in the environment with it)\n"
    if inspect.ismodule(obj):
        names = members or [
            name
            for name, value in vars(obj).items()
            if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == obj.__name__
        ]
        parts = [f"### `{dotted}`\n\n{inspect.getdoc(obj) or ''}\n"]
        parts += [_documented(f"{dotted}.{name}", getattr(obj, name), 4) for name in names if hasattr(obj, name)]
        return "\n".join(parts)
    parts = [_documented(dotted, obj, 3)]
    if inspect.isclass(obj):
        parts += [
            _documented(f"{obj.__name__}.{name}", value, 4)
            for name, value in vars(obj).items()
            if not name.startswith("_") and inspect.isfunction(value) and value.__doc__  # its own, not inherited
        ]
    return "\n".join(parts)


def with_api_reference(markdown: str) -> str:
    """`markdown` with each `::: dotted.name` line (and its indented mkdocstrings options) replaced by
    `api_reference`: the terminal has no mkdocstrings to render them."""
    lines, out, fenced, index = markdown.splitlines(), [], False, 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
        match = None if fenced else API.match(line)
        if match is None:
            out.append(line)
            continue
        options = []
        while index < len(lines) and lines[index].startswith((" ", "\t")) and lines[index].strip():
            options.append(lines[index].strip())
            index += 1
        listed = next((o for o in options if o.startswith("members:")), None)
        members = re.findall(r"\w+", listed.partition(":")[2]) if listed else None
        out.append(api_reference(match.group(1), members).rstrip("\n"))
    return "\n".join(out) + ("\n" if markdown.endswith("\n") else "")


def run(args, extra: list[str]) -> None:
    folder = pages_folder()
    known = pages(folder)
    if args.page is None:
        width = max(map(len, known))
        print(f"ortholab docs PAGE prints a page (Markdown, from {folder}):")
        for name, path in known.items():
            print(f"  {name:<{width}}  {title(path)}")
        return
    name, anchor = resolve(args.page, known)
    markdown = known[name].read_text(encoding="utf-8")
    text = section(markdown, anchor, name) if anchor else markdown  # a section that is not there fails, --path too
    if args.path:
        print(known[name])
        return
    from ortholab.cli.reference import filled

    print(with_api_reference(filled(text)), end="")
