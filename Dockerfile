# The uac image: the `uac` command for the Kafka mode (workers, topic setup) and the embedded one.
# docker-compose.yml passes full commands (["uac", "worker"], ["uac", "topics", "create"]), so there is
# no ENTRYPOINT; run alone, the image prints the CLI's help.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # litellm must not fetch its model cost map from the network at import.
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    UAC_DATA_DIR=/data

WORKDIR /src
# Only what the package build reads (README.md is the project's readme in pyproject.toml).
COPY pyproject.toml README.md ./
COPY uac ./uac
RUN pip install . && rm -rf /src

# A non-root user owning /data, so a named volume mounted there inherits the ownership.
RUN useradd --system --uid 10001 --create-home --shell /usr/sbin/nologin uac \
    && mkdir -p /data && chown uac:uac /data
USER uac
WORKDIR /home/uac

# The worker's web server: /health and /metrics (UAC_WORKER_PORT).
EXPOSE 6066
CMD ["uac", "--help"]
