# syntax=docker/dockerfile:1
# The xpupool image: one `xpupool` command for every role (embedded server, agent, and the
# Kubernetes extender and node agent that deploy/helm/xpupool runs). Two stages: the first builds
# wheels of xpupool and of every dependency; the second installs them from that directory only
# (--no-index), so nothing is fetched after the build, and runs as an unprivileged user whose uid
# (10001) the chart's securityContext names. The engine's compiled loops cache their machine code
# under /tmp (NUMBA_CACHE_DIR): the install is read-only, and the chart mounts /tmp writable.
ARG PYTHON_VERSION=3.11
# Vendor libraries' Python bindings the probes import lazily (probes/nvml.py: pynvml, from
# nvidia-ml-py; the NVIDIA container runtime mounts libnvidia-ml.so itself). Not dependencies of
# the package: a host without the card needs none of them.
ARG PROBE_PACKAGES="nvidia-ml-py"

FROM python:${PYTHON_VERSION}-slim-bookworm AS wheels
ARG PROBE_PACKAGES
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels . ${PROBE_PACKAGES}

FROM python:${PYTHON_VERSION}-slim-bookworm
ARG PROBE_PACKAGES
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_INDEX=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    PATH=/opt/xpupool/bin:$PATH
RUN groupadd --system --gid 10001 xpupool \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/xpupool --create-home \
       --shell /usr/sbin/nologin xpupool
# The wheels are mounted, not copied, so they leave no layer behind.
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    python -m venv /opt/xpupool \
    && /opt/xpupool/bin/pip install --no-index --find-links /wheels --no-cache-dir \
       xpupool ${PROBE_PACKAGES}
USER 10001:10001
WORKDIR /var/lib/xpupool
EXPOSE 8080
ENTRYPOINT ["xpupool"]
CMD ["--help"]
