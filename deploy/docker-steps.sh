#!/usr/bin/env bash
# The Dockerfile's steps, performed without docker (this machine cannot pull base images).
#
# The commands are read from the Dockerfile itself, not copied: the build stage's `pip wheel`,
# the runtime stage's `pip install`, the CMD and the HEALTHCHECK, with the image's paths mapped
# into a scratch folder (/src, /dist, /colony, /var/lib/meclaw) and `python` standing for the
# image's interpreter (the host's python3 to build, a fresh virtualenv for the runtime stage).
# Then the daemon is started by the CMD on a starter colony (`meclaw init`), the HEALTHCHECK
# must pass against it, and SIGTERM must stop it with exit 0.
#
# What this does NOT do, and only a real `docker build` would: pull python:3.11-slim, create
# the meclaw user (useradd needs root and would change this machine), run as that user, mount
# the tree read-only, and bind 0.0.0.0 (here MECLAW_API is 127.0.0.1 on a free port: nothing
# leaves loopback; the token rule is exercised all the same, since the CMD always passes
# --api-token-env). tests/packaging/test_docker_steps.py checks the Dockerfile holds what this
# script reads.
#
# Usage: deploy/docker-steps.sh [PYTHON]   (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
host_python=${1:-python3}
work=$(mktemp -d /tmp/meclaw-docker-steps.XXXXXX)
daemon=""
cleanup() {
    if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then kill "$daemon"; fi
    rm -rf "$work"
}
trap cleanup EXIT
say() { echo "docker-steps: $*"; }

# The Dockerfile's instructions, one per line (continuation lines joined, comments dropped).
instructions() {
    sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' Dockerfile | grep -v '^[[:space:]]*#' | grep -v '^[[:space:]]*$'
}
one() { # the one instruction matching a pattern, with its keyword prefix removed
    local found
    found=$(instructions | grep -E "$1")
    [ "$(printf '%s\n' "$found" | wc -l)" = 1 ] && [ -n "$found" ] ||
        { echo "docker-steps: expected one Dockerfile line matching $1" >&2; exit 1; }
    printf '%s\n' "$found" | sed -E "s#$2##"
}
mapped() { # image paths -> scratch paths (through markers: a mapped path holds /tmp itself)
    sed -e "s#/tmp/dist#@DIST@#g" -e "s#/dist#@DIST@#g" -e "s#/var/lib/meclaw#@STATE@#g" \
        -e "s#/colony#@COLONY@#g" |
        sed -e "s#@DIST@#$work/dist#g" -e "s#@STATE@#$work/state#g" -e "s#@COLONY@#$work/colony#g"
}
build=$(one '^RUN python -m pip wheel ' '^RUN ' | mapped)
install=$(one '^RUN python -m pip install ' '^RUN ' | mapped)
health=$(one '^HEALTHCHECK ' '^HEALTHCHECK .* CMD ' | mapped)
cmd=$(one '^CMD exec meclaw ' '^CMD exec ' | mapped)

say "build stage (COPY . /src): the checkout's files"
mkdir "$work/src" "$work/state"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src"
say "build stage: $build"
(cd "$work/src" && python() { "$host_python" "$@"; } && eval "$build")

say "runtime stage (the image's python is a fresh virtualenv here): $install"
"$host_python" -m venv "$work/venv"
(python() { "$work/venv/bin/python" "$@"; } && eval "$install")
export PATH="$work/venv/bin:$PATH"
[ "$(command -v meclaw)" = "$work/venv/bin/meclaw" ]
say "installed: $(meclaw --version)"

say "the colony tree mounted at /colony: a starter from meclaw init"
meclaw init "$work/colony" >/dev/null
cp "$work/colony/.env.example" "$work/colony/.env"

port=$("$host_python" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
# The token rule: off loopback (the image's 0.0.0.0) the CMD refuses to start without a token,
# before it binds anything.
refused=0
(export MECLAW_API="0.0.0.0:$port" && unset MECLAW_API_TOKEN && cd "$work/state" && eval "$cmd") \
    >"$work/refused.log" 2>&1 || refused=$?
[ "$refused" = 2 ] && grep -q 'MECLAW_API_TOKEN: the variable is unset or empty' "$work/refused.log" ||
    { cat "$work/refused.log" >&2; say "the CMD started without MECLAW_API_TOKEN" >&2; exit 1; }
say "without MECLAW_API_TOKEN the CMD refuses to start (exit 2)"

export MECLAW_API="127.0.0.1:$port" MECLAW_API_TOKEN="docker-steps-token"
say "CMD: $cmd   (MECLAW_API=$MECLAW_API)"
(cd "$work/state" && eval "exec $cmd" >"$work/daemon.log" 2>&1) &
daemon=$!
healthy=""
for _ in $(seq 100); do
    if (python() { "$work/venv/bin/python" "$@"; } && eval "$health") 2>/dev/null; then
        healthy=1
        break
    fi
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.2
done
[ -n "$healthy" ] || { cat "$work/daemon.log" >&2; say "the HEALTHCHECK never passed" >&2; exit 1; }
say "HEALTHCHECK passed: $health"

kill -TERM "$daemon"
status=0
wait "$daemon" || status=$?
daemon=""
[ "$status" = 0 ] || { cat "$work/daemon.log" >&2; say "the daemon exited $status on SIGTERM" >&2; exit 1; }
say "SIGTERM stopped the daemon, exit 0"
[ -f "$work/state/colony.db" ] && [ -f "$work/state/colony.db-lease" ] &&
    [ ! -e "$work/colony/colony.db" ] ||
    { say "the state did not go to the volume (/var/lib/meclaw) alone" >&2; exit 1; }
say "the state is in the volume, none in the tree"
if (python() { "$work/venv/bin/python" "$@"; } && eval "$health") 2>/dev/null; then
    say "the HEALTHCHECK still passes with the daemon stopped" >&2
    exit 1
fi
say "the Dockerfile's steps work"
