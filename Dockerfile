# OrthoLab trainer and dashboard image.
#   docker build -t ortholab .                                  # CUDA build of PyTorch from PyPI (GPU hosts)
#   docker build -t ortholab:cpu --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu .
FROM python:3.11-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://pypi.org/simple

# gcc builds the pesq extension (sdist only); curl serves the dashboard's healthcheck
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential curl \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 ORTHOLAB_DB=sqlite:////data/ortholab.db
WORKDIR /app

# torch first, so the project's `torch>=` range is already met by the wanted build
RUN pip install --index-url "${TORCH_INDEX}" --extra-index-url https://pypi.org/simple "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md LICENSE ./
COPY ortholab ./ortholab
COPY app ./app
COPY training ./training
COPY models ./models
COPY datamodules ./datamodules
COPY db ./db
COPY configs ./configs
COPY tools ./tools
# editable: the package reads configs/ (the papers' tables and configs) next to its modules, in /app
RUN pip install -e . && python tools/install_torchaudio.py

RUN useradd --create-home --uid 1000 ortholab && mkdir -p /data && chown ortholab /data
USER 1000
VOLUME ["/data"]
WORKDIR /data
ENTRYPOINT ["ortholab"]
CMD ["--help"]
