#!/usr/bin/env bash
# iris_ps_accept.sh - examples/iris_ps.yaml (seed 002's iris job: chief, 1 worker, 1 PS,
# an evaluator) run by `dtrain run` on the local backend succeeds and reaches
# eval accuracy >= 0.93 in result.json, by the chief's final evaluation and by the
# evaluator's; the chief exported the model and the PS checkpointed its partition.
# 0.93 is 28 of the 30 held-out flowers. The updates are asynchronous, so the final model
# depends on how the chief's and the worker's pushes interleave: over 118 runs on 2026-11-27
# (a loaded 2-core machine) it classified 29 of 30 in 116 and 28 in 2 - a demand of 29 (the
# 0.95 this test had) failed one run in sixty. A model that misses 3 or more fails (one CI
# run that day ended at 26 of 30 with an eval loss of 0.51 against the usual 0.08-0.10: not
# reproduced in those 118).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ps_example.sh"
ps_example_accept iris_ps.yaml 0.93 1
finish
