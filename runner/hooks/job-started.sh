#!/usr/bin/env bash
# ACTIONS_RUNNER_HOOK_JOB_STARTED for a self-hosted GPU runner (see docs/runner-setup.md).
# Ends the servers earlier jobs of this runner left, checks every GPU is idle and healthy,
# and saves the GPUs' settings for the run's fingerprint. A non-zero exit fails the job
# before it starts.
#
# It runs the perfgate the runner's administrator installed ($PERFGATE_HOOK_BIN), never the
# job's checkout: the hook runs before checkout, and a pull request must not change it.
set -euo pipefail
exec "${PERFGATE_HOOK_BIN:-perfgate}" runner job-started
