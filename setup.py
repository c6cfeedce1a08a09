"""setuptools' build (pyproject.toml holds the project) with one addition: a wheel records the commit it is built
from in ortholab/BUILT_FROM, since an installed wheel has no checkout for db/provenance.py to ask."""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def source_commit() -> str | None:
    """This source tree's commit as a run records it (db/provenance.py's rule), None outside a checkout."""
    spec = importlib.util.spec_from_file_location("provenance", HERE / "db" / "provenance.py")
    provenance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(provenance)  # standard library only at import
    return provenance.commit()


class BuildWithCommit(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode and (commit := source_commit()):  # an editable install asks its checkout
            Path(self.build_lib, "ortholab", "BUILT_FROM").write_text(commit + "\n")


setup(cmdclass={"build_py": BuildWithCommit})
