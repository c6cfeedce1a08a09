"""OrthoLab: orthogonal and unitary recurrent networks, trained with Lightning and recorded in a SQL store.

The repository's top-level folders install as this package's subpackages (pyproject's package-dir):
`ortholab.models` (the families), `ortholab.datamodules` (the tasks), `ortholab.training` (the module, the
optimizers, the CLI), `ortholab.db` (the run store) and `ortholab.app` (the dashboard). `ortholab` is the
only top-level name the install adds. `ortholab.nn` holds every family as a layer with torch.nn.RNN's calling
convention, and the papers' optimizers (docs/library.md).
"""

__version__ = "0.1.0"

from ortholab.threads import size_numba_pool

size_numba_pool()  # before anything imports numba: its pool is sized once (ortholab/threads.py)
