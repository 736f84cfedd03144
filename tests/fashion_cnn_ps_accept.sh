#!/usr/bin/env bash
# fashion_cnn_ps_accept.sh - examples/fashion_mnist_cnn_ps.yaml (the CNN; chief, 2 workers,
# 1 PS, an evaluator) run by `dtrain run` on the local backend succeeds and reaches
# eval accuracy >= 0.90 in result.json, by the chief's final evaluation and by the
# evaluator's; the chief exported the model and the PS checkpointed its partition.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ps_example.sh"
ps_example_accept fashion_mnist_cnn_ps.yaml 0.90 2
finish
