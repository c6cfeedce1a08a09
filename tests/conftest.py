"""Suite-wide settings: the data root is ../shared/data where this checkout has it (MNIST, FSDD, JSB Chorales,
Nottingham), so the demos read their data sets from there; no test fetches through a mirror it did not set."""
import os

from standins import SHARED_DATA

if SHARED_DATA.is_dir():
    os.environ["ORTHOLAB_DATA"] = str(SHARED_DATA)  # read-only there: fetch tests give their own data root
os.environ.pop("ORTHOLAB_DATA_MIRROR", None)
