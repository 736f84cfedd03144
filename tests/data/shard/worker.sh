#!/usr/bin/env bash
# worker.sh - a shard-consuming replica for tests/shard_test.sh: dtrain's C client
# ($DT_TOOLS_DIR/shard_worker) or the Python client (py_worker.py), by replica name:
# the replicas listed in $PY_REPLICAS run Python, the others C. Arguments go to either.
# C workers of odd index report and fetch in two requests, the others in one.
here=$(dirname "$0")
case " ${PY_REPLICAS:-} " in
    *" $DTRAIN_REPLICA "*) exec /usr/bin/python3 "$here/py_worker.py" "$@" ;;
esac
case "$DTRAIN_REPLICA" in
    *[13579]) exec "$DT_TOOLS_DIR/shard_worker" "$@" --separate ;;
    *) exec "$DT_TOOLS_DIR/shard_worker" "$@" ;;
esac
