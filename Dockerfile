# The colony daemon in a container (docs/deploy.md). Two stages: the first builds the project's
# wheel, the second installs only that wheel on a slim Python and runs it as a non-root user.
#
#   docker build -t meclaw .
#   docker run -d --name colony -p 7799:7799 -e MECLAW_API_TOKEN=... \
#       -v "$PWD/my-colony:/colony:ro" -v meclaw-state:/var/lib/meclaw meclaw
#
# The colony tree is mounted read-only at /colony; everything the daemon writes (colony.db, the
# cells' databases, the lease) goes to the volume /var/lib/meclaw through --state-dir. The API
# listens on $MECLAW_API (0.0.0.0:7799 by default). Off loopback meclaw requires a bearer token:
# the container does not start until MECLAW_API_TOKEN is set. deploy/docker-steps.sh performs
# these steps without docker (and tests/packaging/test_docker_steps.py keeps the two in step).

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/meclaw --shell /usr/sbin/nologin meclaw \
    && mkdir -p /var/lib/meclaw /colony \
    && chown meclaw:meclaw /var/lib/meclaw
COPY --from=build /dist/ /tmp/dist/
RUN python -m pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
ENV PYTHONUNBUFFERED=1 \
    MECLAW_API=0.0.0.0:7799
USER meclaw
WORKDIR /var/lib/meclaw
VOLUME ["/var/lib/meclaw"]
EXPOSE 7799
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD python -c "import os, urllib.request as u; port = os.environ['MECLAW_API'].rpartition(':')[2]; u.build_opener(u.ProxyHandler({})).open(f'http://127.0.0.1:{port}/health', timeout=4)"
CMD exec meclaw --root /colony --state-dir /var/lib/meclaw --api "$MECLAW_API" --api-token-env MECLAW_API_TOKEN --log -
