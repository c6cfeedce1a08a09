# OrthoLab trainer and dashboard image, in two stages: a builder with a compiler (the pesq extension is an sdist)
# and a runtime stage without one, which gets the builder's virtual environment and nothing else.
#   docker build -t ortholab .                                                  # CPU build of PyTorch (default)
#   docker build -t ortholab:gpu --build-arg TORCH_INDEX=https://pypi.org/simple .  # PyPI's CUDA build (GPU hosts)
# TORCH_INDEX is the index torch comes from (default: PyTorch's CPU wheels, no CUDA libraries);
# TORCH_VERSION its version (default 2.13.0, as the Makefile). Everything else comes from PyPI. ORTHOLAB_COMMIT
# (e.g. `--build-arg ORTHOLAB_COMMIT=$(git rev-parse --short HEAD)`) is the commit its runs record; unset: unknown.
FROM python:3.11-slim-bookworm AS builder

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

# gcc compiles pesq (no wheel on PyPI); only this stage has it
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 VIRTUAL_ENV=/opt/ortholab PATH=/opt/ortholab/bin:$PATH
# pip --no-compile: bytecode only for the modules that run (the warm-up at the end of this stage writes it)
# torch first, from TORCH_INDEX, so that the project's `torch>=` range is already met by the wanted build
RUN python -m venv /opt/ortholab \
    && pip install --no-compile --index-url "${TORCH_INDEX}" --extra-index-url https://pypi.org/simple "torch==${TORCH_VERSION}"

WORKDIR /src
# the dependencies before the sources, so that editing the code does not reinstall them: the project's own and
# those of its `all` extra (PostgreSQL, sweeps, speech metrics, dashboard), expanding ortholab[...] references
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
x = p.get('optional-dependencies', {}); \
pick = lambda rs: [d for r in rs for d in (pick([e for n in r.split('[', 1)[1].rstrip(']').split(',') for e in x[n]]) \
                   if r.startswith(p['name'] + '[') else [r])]; \
print(*pick(p['dependencies'] + x.get('all', [])), sep='\n')" > /tmp/requirements.txt \
    && pip install --no-compile -r /tmp/requirements.txt
# .dockerignore admits only what the package is built from
COPY . .
# the commit the image's runs record, as the build context has no .git (setup.py; empty: "commit unknown")
ARG ORTHOLAB_COMMIT=
# not editable: the modules, the configs and the published tables are copied into site-packages as package data.
# PYTHONSAFEPATH: the script's check imports the installed `ortholab`, not the source folder of that name in /src
RUN pip install --no-compile --no-deps . && pip check && PYTHONSAFEPATH=1 python tools/install_torchaudio.py

# Slimmer without changing what runs (tests/test_compose_stack.py runs the image): no third-party test suites, C++
# headers, torch's test binaries, Jupyter extensions' assets, pyarrow's Flight and S3 libraries (which only
# `pyarrow.flight` and `pyarrow.fs.S3FileSystem` load), nor the symbol tables of torch's and llvmlite's libraries
WORKDIR /opt/ortholab/lib/python3.11/site-packages
RUN find . -depth -type d -name tests -exec rm -rf {} + \
    && find torch/bin -mindepth 1 ! -name torch_shm_manager -exec rm -rf {} + \
    && rm -rf torch/include torch/test pyarrow/include /opt/ortholab/share/jupyter \
        pydeck/nbextension/static plotly/labextension \
    && rm -f pyarrow/*flight* pyarrow/libarrow_s3.so* pyarrow/_s3fs.* pyarrow/_pyarrow_cpp_tests.* \
    && strip --strip-unneeded torch/lib/libtorch_cpu.so torch/lib/libtorch_python.so llvmlite/binding/libllvmlite.so

# Warm-up, which also proves the install: a two-step training run from the packaged demo config, `ortholab runs`,
# and the dashboard's first page, run here once, write the bytecode of every module they import
WORKDIR /tmp/warm
RUN ortholab fit --config configs/demo/copying_scornn.yaml --db sqlite:////tmp/warm/runs.db --runs_dir /tmp/warm \
        --trainer.max_steps 2 --trainer.val_check_interval 2 --data.init_args.train_size 40 \
        --data.init_args.val_size 20 --data.init_args.test_size 20 \
    && ortholab runs --db sqlite:////tmp/warm/runs.db \
    && ORTHOLAB_DB=sqlite:////tmp/warm/runs.db python -c "import importlib, pkgutil, streamlit.web.bootstrap; \
from streamlit.testing.v1 import AppTest; from ortholab import app; from ortholab.app.launch import APP; \
[importlib.import_module(f'ortholab.app.{m.name}') for m in pkgutil.iter_modules(app.__path__) if m.name != 'main']; \
page = AppTest.from_file(str(APP), default_timeout=300).run(); assert not page.exception, page.exception" \
    && rm -rf /tmp/warm


FROM python:3.11-slim-bookworm

ENV VIRTUAL_ENV=/opt/ortholab PATH=/opt/ortholab/bin:$PATH PYTHONUNBUFFERED=1 \
    ORTHOLAB_DB=sqlite:////data/ortholab.db
RUN useradd --create-home --uid 1000 ortholab && mkdir -p /data && chown ortholab /data
COPY --from=builder /opt/ortholab /opt/ortholab

USER 1000
VOLUME ["/data"]
WORKDIR /data
ENTRYPOINT ["ortholab"]
CMD ["--help"]
