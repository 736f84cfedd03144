#!/usr/bin/env bash
# fashion_ps_accept.sh - the README's main job: examples/fashion_mnist_ps.yaml (chief, 2
# workers, 1 PS, an evaluator) run by `dtrain run` on the local backend succeeds and reaches
# eval accuracy >= 0.88 in result.json, by the chief's final evaluation and by the
# evaluator's; the chief exported the model and the PS checkpointed its partition.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ps_example.sh"
ps_example_accept fashion_mnist_ps.yaml 0.88 2
finish
