"""setuptools' build (pyproject.toml holds the project) with one addition: a wheel records the commit it is built
from in ortholab/BUILT_FROM, since an installed wheel has no checkout for db/provenance.py to ask. A build without
.git (the Docker image's, a wheel from an sdist) takes the commit from ORTHOLAB_COMMIT where it is given."""

import importlib.util
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def source_commit() -> str | None:
    """This source tree's commit as a run records it (db/provenance.py's rule); outside a checkout, ORTHOLAB_COMMIT's
    value, else None."""
    spec = importlib.util.spec_from_file_location("provenance", HERE / "db" / "provenance.py")
    provenance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(provenance)  # standard library only at import
    return provenance.commit() or provenance.given_commit(os.environ.get("ORTHOLAB_COMMIT"))


class BuildWithCommit(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install asks its checkout
            return
        target, commit = Path(self.build_lib, "ortholab", "BUILT_FROM"), source_commit()
        if commit:
            target.write_text(commit + "\n")
        else:  # no checkout (an sdist, a copy without .git): no commit, not an earlier build's left in build/
            target.unlink(missing_ok=True)


setup(cmdclass={"build_py": BuildWithCommit})
