#!/usr/bin/env bash
# iris_ps_accept.sh - examples/iris_ps.yaml (seed 002's iris job: chief, 1 worker, 1 PS,
# an evaluator) run by `dtrain run` on the local backend succeeds and reaches
# eval accuracy >= 0.95 in result.json, by the chief's final evaluation and by the
# evaluator's; the chief exported the model and the PS checkpointed its partition.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ps_example.sh"
ps_example_accept iris_ps.yaml 0.95 1
finish
