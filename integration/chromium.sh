#!/usr/bin/env bash
# Prints the path of a Chromium that can render fedcalib's reports
# headless, for TestReportInBrowser. With FEDCALIB_INSTALL_CHROMIUM=1 (as
# .ci/run sets) it installs Debian's chromium package when none is found,
# as root with apt-get. Exits 3, saying why on stderr, when there is none:
# the test then skips.
set -euo pipefail
for c in chromium chromium-browser; do
  if command -v "$c"; then exit 0; fi
done
if [ "${FEDCALIB_INSTALL_CHROMIUM:-}" != 1 ]; then
  echo "no chromium on PATH (FEDCALIB_INSTALL_CHROMIUM=1 lets this script apt-get install Debian's chromium package)" >&2
  exit 3
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "no chromium on PATH, and it cannot be installed here: apt-get needs root on Debian" >&2
  exit 3
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; } >&2; then
  echo "apt-get install chromium failed" >&2
  exit 3
fi
command -v chromium || { echo "chromium installed but not on PATH" >&2; exit 3; }
