#!/usr/bin/env bash
# Admission benchmark: kerf's webhook against a floor server (axum + rustls, typed Pod parse,
# fixed one-op patch), same ~13 KB pod AdmissionReview, same load generator (wrk, HTTP/1.1 over
# TLS keep-alive), one server at a time. Prints throughput, p99 and the kerf/floor ratios.
#
# Usage: scripts/bench-admission.sh [DURATION_SECONDS=20] [CONNECTIONS=16] [WRK_THREADS=1]
# Needs: wrk (Debian package `wrk`), curl, python3. Builds the bench binary with the bench
# (release) profile.
set -euo pipefail

DURATION="${1:-20}"
CONNS="${2:-16}"
THREADS="${3:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FIXTURE="$ROOT/tests/fixtures/admission/pod-large.json"

for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || { echo "error: $tool is required (apt-get install $tool)" >&2; exit 1; }
done

cd "$ROOT"
BIN="$(cargo bench --bench admission --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="admission":
        print(m["executable"])' | tail -1)"
[ -x "$BIN" ] || { echo "error: could not build the admission bench binary" >&2; exit 1; }

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" certs "$WORK"
python3 -c 'import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1])), separators=(",",":")))' "$FIXTURE" > "$WORK/body.json"
BODY_BYTES=$(wc -c < "$WORK/body.json")
cat > "$WORK/post.lua" <<LUA
local f = io.open("$WORK/body.json", "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA

# wrk latency text (e.g. 812.00us, 1.20ms, 1.01s) → milliseconds.
to_ms() {
    python3 -c 'import re,sys
v,u=re.match(r"([0-9.]+)(us|ms|s|m)$",sys.argv[1]).groups(); v=float(v)
print("%.3f" % (v/1000 if u=="us" else v if u=="ms" else v*1000 if u=="s" else v*60000))' "$1"
}

run_one() { # name port args...
    local name="$1" port="$2"; shift 2
    "$BIN" "$@" 2>"$WORK/$name.log" &
    SERVER_PID=$!
    local url="https://localhost:$port/mutate" ok=""
    for _ in $(seq 1 100); do
        if curl -sk --fail -o "$WORK/$name.resp" -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" "$url" 2>/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    [ -n "$ok" ] || { echo "error: $name did not answer; log:" >&2; cat "$WORK/$name.log" >&2; exit 1; }
    grep -q '"patch"' "$WORK/$name.resp" || { echo "error: $name answered without a patch: $(cat "$WORK/$name.resp")" >&2; exit 1; }
    wrk -t"$THREADS" -c"$CONNS" -d3s -s "$WORK/post.lua" "$url" >/dev/null   # warm-up
    wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$WORK/post.lua" "$url" > "$WORK/$name.wrk"
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
    if grep -q "Non-2xx" "$WORK/$name.wrk"; then echo "error: $name returned non-2xx responses" >&2; cat "$WORK/$name.wrk" >&2; exit 1; fi
    local rps p99
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/$name.wrk")
    p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$WORK/$name.wrk")")
    echo "$rps $p99"
}

read -r FLOOR_RPS FLOOR_P99 < <(run_one floor 18443 floor 127.0.0.1:18443 "$WORK/tls.crt" "$WORK/tls.key")
read -r KERF_RPS KERF_P99 < <(run_one kerf 18444 kerf 127.0.0.1:18444 "$WORK/tls.crt" "$WORK/tls.key" "$FIXTURE")

python3 - "$FLOOR_RPS" "$FLOOR_P99" "$KERF_RPS" "$KERF_P99" "$BODY_BYTES" "$DURATION" "$CONNS" "$THREADS" <<'PY'
import sys
fr, fp, kr, kp = map(float, sys.argv[1:5])
body, dur, conns, threads = sys.argv[5:9]
print(f"body {body} bytes, wrk -t{threads} -c{conns} -d{dur}s, HTTP/1.1 keep-alive over TLS")
print("| server | requests/s | p99 (ms) |")
print("|---|---:|---:|")
print(f"| floor (axum + rustls, typed Pod, fixed patch) | {fr:.0f} | {fp:.2f} |")
print(f"| kerf /mutate | {kr:.0f} | {kp:.2f} |")
print(f"| ratio kerf/floor | {kr/fr:.2f}x | {kp/fp:.2f}x |")
ok = kr/fr >= 0.8 and kp/fp <= 1.5
print("goal (throughput >= 0.8x, p99 <= 1.5x):", "met" if ok else "NOT met")
PY
