# One image for every subcommand: `kvpin operator`, `kvpin router`, `kvpin sim`.
# Build: docker build -t ghcr.io/kvpin/kvpin:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kvpin kvpin
COPY operator operator
COPY router router
COPY sim sim
COPY bench bench
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# No build tools, no pip cache, no shell for the user; runs with a read-only root filesystem
# (nothing is written at run time: no bytecode, logs go to stderr).
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin kvpin
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels /root/.cache
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["kvpin"]
CMD ["--help"]
