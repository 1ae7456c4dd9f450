#!/usr/bin/env bash
# Admission benchmark: kerf's webhook against a floor server (axum + rustls, typed Pod parse,
# fixed one-op patch) and a null server (kerf's own TLS/HTTP stack, body read, fixed answer, no
# parsing), same ~13 KB pod AdmissionReview, HTTP/1.1 keep-alive over TLS, one server at a
# time. Each server, each round, gets two runs:
#   1. saturated: wrk (closed loop) -- throughput, and the p99 at saturation (mostly queueing:
#      connections / throughput);
#   2. fixed rates: the bench binary's open-loop generator (`admission openloop`) offers the same
#      rates (requests/s) to every server, one run per rate, and times each request from when it
#      was due (no coordinated omission) -- the p99 at the same load, at several loads.
# Prints throughput, the p99s and kerf's ratios to the null and floor servers.
# Paired throughput: before the rounds, PAIRS (default 6) sets of PAIR_SECONDS (default 5) s
# saturated runs of the null server and kerf back to back, the order alternating, each pair's
# ratio taken on its own and the median reported. Each run of the sets also reads the server's
# CPU time (user and system, /proc/PID/stat) and reports it per request: the system part grows
# when the load generator idles and each answer has to wake it. The VM's speed
# drifts over minutes (the same server's saturated rate moved by a third between rounds), and
# the rounds run a server's saturated and fixed-rate runs in one block, so a round's two
# saturated runs are a minute or more apart; adjacent runs see the same machine.
#
# Usage: scripts/bench-admission.sh [DURATION_SECONDS=20] [CONNECTIONS=16] [WRK_THREADS=1] [ROUNDS=3] [RATES=1000,2500,5000,auto]
# RATES is a comma-separated list of offered rates; `auto` is half of kerf's saturated
# throughput in a 5 s calibration run before the rounds. The same rates are used for all
# servers and printed. Reports the median over ROUNDS runs of each server, the order rotating
# every round.
# Pinning: the server under test runs on the CPUs in SERVER_CPUS (default 0) and the load
# generators (wrk, openloop, curl) on LOAD_CPUS (default 1), with `taskset`, so the server and
# the generator do not take turns on the same core (which made the fixed-rate p99 mostly
# scheduling). Set both empty to run unpinned. Other processes on the machine are not pinned
# away: run on a quiet machine and read `uptime`.
# DUMP_DIR (optional, an existing directory): every fixed-rate run also writes each request's
# due time and latency there (`<server>.<round>.<rate>.txt`), to see when the slow ones were due.
# Needs: wrk (Debian package `wrk`), curl, python3, taskset (util-linux). Builds the bench
# binary with the bench (release) profile.
set -euo pipefail

DURATION="${1:-20}"
CONNS="${2:-16}"
THREADS="${3:-1}"
ROUNDS="${4:-3}"
RATES="${5:-1000,2500,5000,auto}"
SERVER_CPUS="${SERVER_CPUS-0}"
LOAD_CPUS="${LOAD_CPUS-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FIXTURE="$ROOT/tests/fixtures/admission/pod-large.json"

for tool in wrk curl python3 taskset; do
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

# `on CPUS cmd…`: cmd pinned to CPUS, or as is when CPUS is empty.
on() {
    local cpus="$1"; shift
    if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

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

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

start_server() { # name port args...
    local name="$1" port="$2"; shift 2
    # taskset execs the server, so $! is the server's pid (cleanup stops it).
    if [ -n "$SERVER_CPUS" ]; then
        taskset -c "$SERVER_CPUS" "$BIN" "$@" 2>"$WORK/$name.log" &
    else
        "$BIN" "$@" 2>"$WORK/$name.log" &
    fi
    PIDS+=($!)
    echo $! > "$WORK/$name.pid"
    local url="https://localhost:$port/mutate" ok=""
    for _ in $(seq 1 100); do
        if on "$LOAD_CPUS" curl -sk --fail -o "$WORK/$name.resp" -H 'Content-Type: application/json' --data-binary @"$WORK/body.json" "$url" 2>/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    [ -n "$ok" ] || { echo "error: $name did not answer; log:" >&2; cat "$WORK/$name.log" >&2; exit 1; }
    grep -q '"patch"' "$WORK/$name.resp" || { echo "error: $name answered without a patch: $(cat "$WORK/$name.resp")" >&2; exit 1; }
    on "$LOAD_CPUS" wrk -t"$THREADS" -c"$CONNS" -d3s -s "$WORK/post.lua" "$url" >/dev/null   # warm-up
}

measure() { # name port round → appends "rps p99ms [p50ms p99ms per rate]" to $WORK/name.results
    local name="$1" port="$2" round="$3" url="https://localhost:$2/mutate"
    on "$LOAD_CPUS" wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --latency -s "$WORK/post.lua" "$url" > "$WORK/$name.$round.wrk"
    if grep -q "Non-2xx" "$WORK/$name.$round.wrk"; then echo "error: $name returned non-2xx responses" >&2; cat "$WORK/$name.$round.wrk" >&2; exit 1; fi
    local rps p99 open row rate line
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/$name.$round.wrk")
    p99=$(to_ms "$(awk '$1=="99%" {print $2}' "$WORK/$name.$round.wrk")")
    row="$rps $p99"
    line="round $round $name: $rps req/s, p99 $p99 ms saturated"
    for rate in ${RATES//,/ }; do
        open=$(OPENLOOP_DUMP="${DUMP_DIR:+$DUMP_DIR/$name.$round.$rate.txt}" \
            on "$LOAD_CPUS" "$BIN" openloop "$url" "$rate" "$DURATION" "$CONNS" "$WORK/body.json")
        field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $open"; }
        [ "$(field errors)" = 0 ] || { echo "error: $name failed requests at $rate req/s: $open" >&2; exit 1; }
        python3 -c 'import sys; a,r=map(float,sys.argv[1:]); sys.exit(a < 0.95*r)' "$(field answered_per_s)" "$rate" \
            || echo "warning: $name answered fewer than 95 % of $rate req/s: $open" >&2
        row="$row $(field p50) $(field p99)"
        line="$line; at $rate req/s p50 $(field p50) p99 $(field p99) ms (pacer late p99 $(field pacer_late_p99) ms)"
    done
    echo "$row" >> "$WORK/$name.results"
    echo "$line" >&2
}

# All servers up; the order rotates every round so background load drifts hit each alike.
start_server floor 18443 floor 127.0.0.1:18443 "$WORK/tls.crt" "$WORK/tls.key"
start_server null 18445 null 127.0.0.1:18445 "$WORK/tls.crt" "$WORK/tls.key"
start_server kerf 18444 kerf 127.0.0.1:18444 "$WORK/tls.crt" "$WORK/tls.key" "$FIXTURE"
if [[ ",$RATES," == *,auto,* ]]; then
    calib=$(on "$LOAD_CPUS" wrk -t"$THREADS" -c"$CONNS" -d5s -s "$WORK/post.lua" "https://localhost:18444/mutate" | awk '/^Requests\/sec:/ {print $2}')
    half=$(python3 -c 'import sys; print(int(float(sys.argv[1]) / 2))' "$calib")
    RATES=$(sed "s/\bauto\b/$half/" <<<"$RATES")
    echo "auto rate: $half req/s (half of kerf's $calib req/s in a 5 s calibration run)" >&2
fi
echo "fixed offered rates: $RATES req/s; server on CPUs ${SERVER_CPUS:-any}, load generators on CPUs ${LOAD_CPUS:-any}; $(uptime)" >&2
# The server's CPU time so far, user and system, in clock ticks (/proc/PID/stat fields 14, 15).
cpu_ticks() { awk '{print $14, $15}' "/proc/$(cat "$WORK/$1.pid")/stat"; }
sat_rps() { # port seconds name → saturated req/s, then the server's user and system µs per request
    local before after out
    before=$(cpu_ticks "$3")
    out=$(on "$LOAD_CPUS" wrk -t"$THREADS" -c"$CONNS" -d"$2s" -s "$WORK/post.lua" "https://localhost:$1/mutate")
    after=$(cpu_ticks "$3")
    python3 -c 'import os, sys
rps, n = float(sys.argv[1]), float(sys.argv[2])
(u0, s0), (u1, s1) = map(int, sys.argv[3].split()), map(int, sys.argv[4].split())
us = 1e6 / os.sysconf("SC_CLK_TCK") / n
print(f"{rps} {(u1 - u0) * us:.2f} {(s1 - s0) * us:.2f}")' \
        "$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")" "$(awk '/requests in/ {print $1}' <<<"$out")" "$before" "$after"
}
PAIRS="${PAIRS:-6}"
PAIR_SECONDS="${PAIR_SECONDS:-5}"
for pair in $(seq 1 "$PAIRS"); do
    if [ $((pair % 2)) = 1 ]; then
        n=$(sat_rps 18445 "$PAIR_SECONDS" null); k=$(sat_rps 18444 "$PAIR_SECONDS" kerf); f=$(sat_rps 18443 "$PAIR_SECONDS" floor)
    else
        f=$(sat_rps 18443 "$PAIR_SECONDS" floor); k=$(sat_rps 18444 "$PAIR_SECONDS" kerf); n=$(sat_rps 18445 "$PAIR_SECONDS" null)
    fi
    # One line per set: the three throughputs, then each server's user and system µs per request.
    read -r n nu ns <<<"$n"; read -r k ku ks <<<"$k"; read -r f fu fs <<<"$f"
    echo "$n $k $f $nu $ns $ku $ks $fu $fs" >> "$WORK/pairs.results"
    echo "pair $pair: null $n req/s, kerf $k req/s, floor $f req/s, kerf/null $(python3 -c 'import sys; print("%.3f" % (float(sys.argv[2]) / float(sys.argv[1])))' "$n" "$k"); CPU per request (user+system µs): null $nu+$ns, kerf $ku+$ks, floor $fu+$fs" >&2
done
for round in $(seq 1 "$ROUNDS"); do
    case $((round % 3)) in
        1) order="floor:18443 null:18445 kerf:18444" ;;
        2) order="kerf:18444 floor:18443 null:18445" ;;
        0) order="null:18445 kerf:18444 floor:18443" ;;
    esac
    for s in $order; do measure "${s%%:*}" "${s##*:}" "$round"; done
done

python3 - "$WORK/floor.results" "$WORK/null.results" "$WORK/kerf.results" "$BODY_BYTES" "$DURATION" "$CONNS" "$THREADS" "$ROUNDS" "$RATES" "${SERVER_CPUS:-any}" "${LOAD_CPUS:-any}" "$WORK/pairs.results" "$PAIR_SECONDS" <<'PY'
import statistics, sys
def load(p):
    rows = [tuple(map(float, l.split())) for l in open(p) if l.strip()]
    return [statistics.median(r[i] for r in rows) for i in range(len(rows[0]))]
f, n, k = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
body, dur, conns, threads, rounds, rates, scpu, lcpu, pairs_file, pair_s = sys.argv[4:14]
pairs = [tuple(map(float, l.split())) for l in open(pairs_file) if l.strip()]
paired = statistics.median(p[1] / p[0] for p in pairs)
paired_floor = statistics.median(p[1] / p[2] for p in pairs)
# Microseconds of one core per request (the server has one CPU).
us = lambda x: 1e6 / x
us_null = statistics.median(us(p[0]) for p in pairs)
us_kerf = statistics.median(us(p[1]) for p in pairs)
# The CPU time each server's process took per request in the same sets, user and system
# (medians): the system part grows when the load generator idles and each answer wakes it.
cpu = {name: (statistics.median(p[3 + 2 * i] for p in pairs), statistics.median(p[4 + 2 * i] for p in pairs))
       for i, name in enumerate(("null", "kerf", "floor"))}
cpu_floor = statistics.median((p[7] + p[8]) / (p[5] + p[6]) for p in pairs if p[5] + p[6] > 0)
rates = rates.split(",")
print(f"body {body} bytes, HTTP/1.1 keep-alive over TLS, {conns} connections, {dur} s per run, median of {rounds} rounds (order rotating); server on CPUs {scpu}, load generators on CPUs {lcpu}")
print(f"saturated: wrk -t{threads} -c{conns} (closed loop); fixed rates: open loop at {', '.join(rates)} req/s for every server, latency from each request's due time")
head = "| server | saturated req/s | saturated p99 (ms) |" + "".join(f" p50 / p99 at {r} req/s (ms) |" for r in rates)
print(head)
print("|---|---:|---:|" + "---:|" * len(rates))
def row(name, v):
    return f"| {name} | {v[0]:.0f} | {v[1]:.2f} |" + "".join(f" {v[2+2*i]:.2f} / {v[3+2*i]:.2f} |" for i in range(len(rates)))
print(row("null (kerf's TLS/HTTP stack, body read, fixed answer)", n))
print(row("floor (axum + rustls, typed Pod, fixed patch)", f))
print(row("kerf /mutate", k))
for name, o in (("null", n), ("floor", f)):
    print(f"| ratio kerf/{name} | {k[0]/o[0]:.2f}x | {k[1]/o[1]:.2f}x |" + "".join(f" {k[2+2*i]/o[2+2*i]:.2f}x / {k[3+2*i]/o[3+2*i]:.2f}x |" for i in range(len(rates))))
print(f"paired saturated throughput ({len(pairs)} sets of {pair_s} s runs back to back, order alternating): kerf/null median {paired:.2f}x, kerf/floor median {paired_floor:.2f}x (sets kerf/floor: {', '.join('%.2f' % (p[1] / p[2]) for p in pairs)}); per request (us of the server's core, medians): null {us_null:.1f}, kerf {us_kerf:.1f}")
print(f"CPU time per request in those sets (us of the server's process, user + system, medians): " + ", ".join(f"{name} {u:.1f} + {s_:.1f}" for name, (u, s_) in cpu.items()) + f"; floor/kerf by CPU time, median of the sets: {cpu_floor:.2f}x")
# The floor to hold: throughput >= 1.5x the floor server (paired), p99 within 1.2x the null
# server's at 1,000 and 2,500 req/s.
print(f"goal: throughput >= 1.5x the floor server (paired median): {'met' if paired_floor >= 1.5 else 'NOT met'} ({paired_floor:.2f}x)")
for r in ("1000", "2500"):
    if r in rates:
        i = rates.index(r)
        ratio = k[3+2*i] / n[3+2*i]
        print(f"goal: p99 <= 1.2x the null server's at {r} req/s: {'met' if ratio <= 1.2 else 'NOT met'} ({ratio:.2f}x)")
PY
