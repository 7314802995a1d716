#!/usr/bin/env bash
# Real MongoDB in Docker for mongoshift's suite and benchmark: the one script the workflows of
# .github/workflows run, so that a maintainer's laptop runs exactly what CI runs.
#
#   tools/real-mongo.sh test 7.0      a single-node replica set, the README's test command against it, then the slow tests
#   tools/real-mongo.sh sharded 8.0   a config server, two shards and a mongos; the sharded tests against the mongos
#   tools/real-mongo.sh bench 7.0     bench/background.py against a replica set, its JSON in bench-results/
#   tools/real-mongo.sh all 7.0       the three, one after the other
#
# The building blocks, for running tests by hand:
#
#   tools/real-mongo.sh up 7.0           starts the replica set and prints its URI (the only line on stdout)
#   tools/real-mongo.sh up-sharded 7.0   starts the sharded cluster and prints the mongos URI
#   tools/real-mongo.sh down             removes every container and the network this script started
#
# Every mongod and mongos runs with --setParameter enableTestCommands=1: the suite's fail points
# (configureFailPoint failCommand) need it. Ports are bound to 127.0.0.1 only. test, sharded and
# bench stop what they started on exit, pass or fail (KEEP=1 leaves it running), and print the
# last lines of each server's log when they fail.
#
# Environment: PYTHON (the Python 3.13 that makes .venv when it is missing; python3),
# RS_PORT (27217) and MONGOS_PORT (27218), the host ports; BENCH_OUT, bench's JSON file.
set -euo pipefail
cd "$(dirname "$0")/.."

LABEL="mongoshift.real-mongo"
PREFIX="mongoshift-real"
NETWORK="$PREFIX"
RS_PORT="${RS_PORT:-27217}"
MONGOS_PORT="${MONGOS_PORT:-27218}"
WAIT_SECONDS="${WAIT_SECONDS:-180}"
TEST_PARAMS=(--setParameter enableTestCommands=1)

say() { echo "real-mongo: $*" >&2; }
die() { say "$*"; exit 2; }

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

check_version() {
    [[ "${1:-}" =~ ^[0-9]+\.[0-9]+$ ]] || die "a MongoDB version such as 7.0 is needed, not '${1:-}'"
}

# start NAME [docker run options] IMAGE [COMMAND...]: a container on the script's network,
# labelled so that `down` finds it.
start() {
    local name="$1"
    shift
    docker run --detach --name "$name" --hostname "$name" --network "$NETWORK" --label "$LABEL=1" "$@" >/dev/null
    say "started $name"
}

network() {
    docker network inspect "$NETWORK" >/dev/null 2>&1 || docker network create --label "$LABEL=1" "$NETWORK" >/dev/null
}

# mongosh inside the container, against the server listening there on PORT.
shell() {
    local name="$1" port="$2" script="$3"
    docker exec "$name" mongosh --quiet --port "$port" --eval "$script"
}

# Polls until the mongosh expression prints true; bounded by WAIT_SECONDS.
wait_for() {
    local what="$1" name="$2" port="$3" expression="$4" waited=0
    until [ "$(shell "$name" "$port" "$expression" 2>/dev/null | tail -n 1)" = "true" ]; do
        if [ "$waited" -ge "$WAIT_SECONDS" ]; then
            docker logs --tail 30 "$name" >&2 || true
            die "$name: $what not within ${WAIT_SECONDS}s"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "$name: $what"
}

answers() { wait_for "answers" "$1" "$2" 'db.adminCommand({ping: 1}).ok === 1'; }

# A one-member replica set; HOST is the member's name as every client (and mongos) will reach it.
initiate() {
    local name="$1" port="$2" set="$3" host="$4" extra="${5:-}"
    answers "$name" "$port"
    shell "$name" "$port" "rs.initiate({_id: '$set', $extra members: [{_id: 0, host: '$host'}]})" >/dev/null
    wait_for "primary of $set" "$name" "$port" 'db.hello().isWritablePrimary === true'
}

up_rs() {
    local version="$1" name="$PREFIX-rs"
    check_version "$version"
    network
    # The member is named localhost:RS_PORT, the port it listens on inside the container and
    # on the host, so that the driver's discovery finds it from both sides.
    start "$name" --publish "127.0.0.1:$RS_PORT:$RS_PORT" "mongo:$version" \
        mongod --replSet rs0 --port "$RS_PORT" --bind_ip_all "${TEST_PARAMS[@]}"
    initiate "$name" "$RS_PORT" rs0 "localhost:$RS_PORT"
    echo "mongodb://localhost:$RS_PORT/?replicaSet=rs0"
}

up_sharded() {
    local version="$1" cache=(--wiredTigerCacheSizeGB 0.25)
    check_version "$version"
    network
    # Only the mongos is published: the shards and the config server are reached by their
    # container names on the network, which is how mongos and the shards name each other.
    start "$PREFIX-cfg" "mongo:$version" \
        mongod --configsvr --replSet cfg --port 27019 --bind_ip_all "${cache[@]}" "${TEST_PARAMS[@]}"
    for shard in sh1 sh2; do
        start "$PREFIX-$shard" "mongo:$version" \
            mongod --shardsvr --replSet "$shard" --port 27018 --bind_ip_all "${cache[@]}" "${TEST_PARAMS[@]}"
    done
    initiate "$PREFIX-cfg" 27019 cfg "$PREFIX-cfg:27019" "configsvr: true,"
    for shard in sh1 sh2; do
        initiate "$PREFIX-$shard" 27018 "$shard" "$PREFIX-$shard:27018"
    done
    start "$PREFIX-mongos" --publish "127.0.0.1:$MONGOS_PORT:$MONGOS_PORT" "mongo:$version" \
        mongos --configdb "cfg/$PREFIX-cfg:27019" --port "$MONGOS_PORT" --bind_ip_all "${TEST_PARAMS[@]}"
    answers "$PREFIX-mongos" "$MONGOS_PORT"
    for shard in sh1 sh2; do
        shell "$PREFIX-mongos" "$MONGOS_PORT" "sh.addShard('$shard/$PREFIX-$shard:27018')" >/dev/null
    done
    wait_for "two shards" "$PREFIX-mongos" "$MONGOS_PORT" 'db.adminCommand({listShards: 1}).shards.length === 2'
    echo "mongodb://localhost:$MONGOS_PORT/"
}

# Redis and RabbitMQ for the Celery tests (tests/celery), unless something already listens there.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

brokers() {
    network
    if ! listening 6379; then
        start "$PREFIX-redis" --publish 127.0.0.1:6379:6379 redis:7
    fi
    if ! listening 5672; then
        start "$PREFIX-rabbitmq" --publish 127.0.0.1:5672:5672 rabbitmq:3
    fi
    local waited=0
    until listening 6379 && listening 5672; do
        if [ "$waited" -ge "$WAIT_SECONDS" ]; then
            say "Redis or RabbitMQ did not answer within ${WAIT_SECONDS}s: the Celery tests will skip and say why"
            return 0
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

containers() { docker ps --all --quiet --filter "label=$LABEL"; }

down() {
    local ids
    ids="$(containers)"
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086  # one id per word
        docker rm --force --volumes $ids >/dev/null
    fi
    docker network rm "$NETWORK" >/dev/null 2>&1 || true
    say "stopped"
}

# On exit of test/sharded/bench: the servers' last log lines when it failed, then down (unless KEEP=1).
finish() {
    local status=$?
    if [ "$status" -ne 0 ]; then
        for id in $(containers); do
            say "last log lines of $(docker inspect --format '{{.Name}}' "$id")"
            docker logs --tail 40 "$id" >&2 || true
        done
    fi
    if [ "${KEEP:-0}" = "1" ]; then
        say "KEEP=1: left running; tools/real-mongo.sh down stops it"
    else
        down
    fi
    exit "$status"
}

# The README's install: a .venv with the test extra.
venv() {
    [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
    .venv/bin/pip install --quiet -e '.[test]'
}

run_tests() {
    local version="$1" uri
    check_version "$version"
    venv
    brokers
    uri="$(up_rs "$version")"
    # The README's test command (two workers, the slow tests left out), then the slow tests, as .ci/run
    # does; the slow tests run even when the first run failed, so that one run reports both.
    local failed=0
    MONGOSHIFT_TEST_URI="$uri" .venv/bin/python -m pytest || failed=1
    MONGOSHIFT_TEST_URI="$uri" .venv/bin/python -m pytest -m slow || failed=1
    return "$failed"
}

run_sharded() {
    local version="$1" uri
    check_version "$version"
    venv
    uri="$(up_sharded "$version")"
    MONGOSHIFT_TEST_URI="$uri" .venv/bin/python -m pytest tests/background/test_sharded.py tests/background/test_sharded_cluster.py
}

run_bench() {
    local version="$1" uri out
    check_version "$version"
    out="${BENCH_OUT:-bench-results/background-mongodb-$version.json}"
    mkdir -p "$(dirname "$out")"
    venv
    uri="$(up_rs "$version")"
    .venv/bin/python bench/background.py --uri "$uri" --json "$out"
    say "results: $out"
}

command -v docker >/dev/null || die "docker is not installed (or not on PATH)"
case "${1:-}" in
    up) up_rs "${2:-}" ;;
    up-sharded) up_sharded "${2:-}" ;;
    down) down ;;
    test) trap finish EXIT; run_tests "${2:-}" ;;
    sharded) trap finish EXIT; run_sharded "${2:-}" ;;
    bench) trap finish EXIT; run_bench "${2:-}" ;;
    all)
        trap finish EXIT
        run_tests "${2:-}"
        down
        run_sharded "${2:-}"
        down
        run_bench "${2:-}"
        ;;
    *) usage ;;
esac
