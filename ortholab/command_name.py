"""How this installation's `ortholab` is typed here, and error lines that name commands the way they can be typed."""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from pathlib import Path


def console_command() -> str:
    """How to type this installation's `ortholab`: the bare name where PATH finds it, its path otherwise (a venv
    not activated, as after `make demo`)."""
    script = Path(sys.executable).parent / "ortholab"
    found = shutil.which("ortholab")
    if not script.exists() or (found is not None and Path(found).resolve() == script.resolve()):
        return "ortholab"
    with contextlib.suppress(ValueError):  # under the current folder: as typed there, e.g. .venv/bin/ortholab
        return str(script.relative_to(Path.cwd()))
    return str(script)


def as_typed(message: str) -> str:
    """`message` with each command it quotes (`ortholab runs`) as this installation's script is typed here."""
    typed = console_command()
    return message if typed == "ortholab" else re.sub(r"`ortholab(?=[ `])", lambda _: f"`{typed}", message)
