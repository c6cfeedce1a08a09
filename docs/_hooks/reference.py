"""MkDocs hook: fills in the pages' markers from the code (ortholab/cli/reference.py, shared with `ortholab docs`)
and fails the build when a registered family has no page, a task or a command no section."""

from __future__ import annotations

import os

from mkdocs.exceptions import PluginError

from ortholab.cli.reference import coverage_problems, filled

API_SOURCE = "build/api-source"  # mkdocs.yml's mkdocstrings `paths`: the installed layout, as symlinks


def link_installed_layout(root: str) -> None:
    """Lay out the package as installed (`ortholab.training` -> training/, pyproject's package-dir) under
    API_SOURCE with symlinks, so mkdocstrings (griffe) reads the sources statically under their import names."""
    import shutil
    import tomllib
    from pathlib import Path

    repo = Path(root)
    mapping = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    target = repo / API_SOURCE
    for package, folder in sorted(mapping.items()):
        link = target.joinpath(*package.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        if package == "ortholab":  # the top package: copies of its few files (griffe resolves a linked
            link.mkdir(exist_ok=True)  # __init__.py to its real folder), its subpackages linked in beside them
            for item in (repo / folder).glob("*.py"):
                shutil.copyfile(item, link / item.name)
        elif not link.is_symlink():
            link.symlink_to((repo / folder).resolve(), target_is_directory=True)


def on_startup(command, dirty):
    """Lay the package out before mkdocstrings' handler resolves its `paths` (at on_config: too late for a first
    build). The repository is two folders above this file."""
    link_installed_layout(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def on_files(files, config):
    sources = {}
    for file in files.documentation_pages():
        with open(file.abs_src_path, encoding="utf-8") as handle:
            sources[file.src_uri] = handle.read()
    problems = coverage_problems(sources)
    if problems:
        raise PluginError("undocumented: " + "; ".join(problems))
    return files


def on_page_markdown(markdown, page, config, files):
    try:
        return filled(markdown)
    except KeyError as missing:
        raise PluginError(f"{page.file.src_uri}: {missing} is not registered") from None
    except RuntimeError as error:
        raise PluginError(f"{page.file.src_uri}: {error}") from None
