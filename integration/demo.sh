#!/usr/bin/env bash
# The end-to-end demo run by `make demo`. Placeholder replaced below.
set -euo pipefail
echo "demo: not yet assembled"
