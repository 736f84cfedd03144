#!/usr/bin/env bash
# worker.sh - a shard-consuming replica for tests/shard_test.sh: dtrain's C client
# ($DT_TOOLS_DIR/shard_worker) or the Python client (py_worker.py), by replica name:
# the replicas listed in $PY_REPLICAS run Python, the others C. Arguments go to either.
here=$(dirname "$0")
case " ${PY_REPLICAS:-} " in
    *" $DTRAIN_REPLICA "*) exec /usr/bin/python3 "$here/py_worker.py" "$@" ;;
    *) exec "$DT_TOOLS_DIR/shard_worker" "$@" ;;
esac
