"""Suite-wide settings: the data root is ../shared/data where this checkout has it (MNIST, FSDD, JSB Chorales,
Nottingham), so the demos read their data sets from there; no test fetches through a mirror it did not set."""

import os

from standins import SHARED_DATA

if SHARED_DATA.is_dir():
    os.environ["ORTHOLAB_DATA"] = str(SHARED_DATA)  # read-only there: fetch tests give their own data root
os.environ.pop("ORTHOLAB_DATA_MIRROR", None)
# a user's own run store never receives test runs: tests that want one name it (or set these themselves)
os.environ.pop("ORTHOLAB_DB", None)
os.environ.pop("ORTHOLAB_RUNS", None)
# the tests' own callbacks and fault injectors (faults.SignalAt, ...) that configs name by class path: the
# allow-list of config modules admits them only through this variable, as a user admits their own packages
os.environ["ORTHOLAB_CONFIG_MODULES"] = "faults,hostile_faults,test_bad_input,map_probe"
