#!/usr/bin/env bash
# Scrapes a coordinator's --metrics with a real Prometheus server once and
# prints the fedcalib metrics' names as Prometheus stored them: the check
# that the endpoint works with the server operators run, not only with
# Prometheus's parser (network/metrics tests that). It installs Debian's
# prometheus package when no prometheus binary is on PATH (as root, or
# with sudo). Not run by make test:
#
#   integration/prometheus.sh
#
# The coordinator waits for clients that never come (its metrics are
# served from the start); both processes are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends prometheus >/dev/null
fi
prometheus --version 2>&1 | head -1

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/fedcalib" ./cmd/fedcalib
"$tmp/fedcalib" keys new --out "$tmp/c0.nkey" > "$tmp/allow.txt"
"$tmp/fedcalib" serve --method temp --rounds 2 --sample-rate 1 --clients "$tmp/allow.txt" \
  --store "$tmp/store" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --enrol-timeout 5m \
  --out "$tmp/c.json" 2> "$tmp/serve.log" &
pids+=($!)

target=""
for _ in $(seq 100); do
  target=$(sed -n 's|^serving metrics at http://\(127\.0\.0\.1:[0-9]*\)/metrics$|\1|p' "$tmp/serve.log")
  [ -n "$target" ] && break
  sleep 0.1
done
[ -n "$target" ] || { echo "serve printed no metrics address:" >&2; cat "$tmp/serve.log" >&2; exit 1; }
echo "coordinator metrics at $target"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: fedcalib-coordinator
    static_configs:
      - targets: ["$target"]
YML
prometheus --config.file "$tmp/prometheus.yml" --storage.tsdb.path "$tmp/tsdb" \
  --web.listen-address "127.0.0.1:$port" > "$tmp/prometheus.log" 2>&1 &
pids+=($!)

api="http://127.0.0.1:$port/api/v1"
for _ in $(seq 120); do
  if curl -fsS "$api/query?query=fedcalib_coordinator_clients_allowed" 2>/dev/null | grep -q '"value":\[[^]]*,"1"\]'; then
    echo "Prometheus scraped the coordinator: fedcalib_coordinator_clients_allowed = 1"
    curl -fsS "$api/label/__name__/values" | python3 -c '
import json, sys
names = [n for n in json.load(sys.stdin)["data"] if n.startswith("fedcalib_")]
print("\n".join(names))
print(len(names), "fedcalib metrics")
'
    exit 0
  fi
  sleep 0.5
done
echo "Prometheus did not scrape the coordinator in 60s" >&2
tail -20 "$tmp/prometheus.log" >&2
exit 1
