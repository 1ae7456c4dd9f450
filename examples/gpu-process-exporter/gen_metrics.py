#!/usr/bin/env python3
"""Writes metrics.om: 30 minutes of GPU Process Exporter series ending at 2026-01-01T12:00:00Z,
shaped as the exporter exposes them (one series per device, labels node, namespace, pod,
container, container_id, gpu_allocation_type, gpu_uuid, gpu_model; scraped every 60 s, off the
minute), plus the series the shipped recording rule (manifests/monitoring/gpu-rules.yaml)
records from them, evaluated every 60 s by a real Prometheus:

    python3 examples/gpu-process-exporter/gen_metrics.py   # needs promtool, prometheus, PyYAML
"""
import json, os, shutil, socket, subprocess, tempfile, time, urllib.parse, urllib.request

END = 1767268800  # 2026-01-01T12:00:00Z
START = END - 1800
SCRAPE_PHASE = 7  # seconds after the minute: scrapes are not aligned to kerf's query grid
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))

# (pod, container, container_id, [(gpu_uuid, SM percent of the device, footprint percent of the
# container's share of the device)]): the same usage on every device.
CONTAINERS = [
    ("chat-7b6c5d4f9-k2m8p", "inference", "containerd://1f0e2d3c",
     [("GPU-3f1c9a2e-5b7d-4e8f-9a0b-1c2d3e4f5a61", 70.0, 80.0)]),
    ("chat-xl-5d4c3b2a1-p9q7r", "inference", "containerd://7a6b5c4d",
     [("GPU-3f1c9a2e-5b7d-4e8f-9a0b-1c2d3e4f5a62", 70.0, 80.0),
      ("GPU-3f1c9a2e-5b7d-4e8f-9a0b-1c2d3e4f5a63", 70.0, 80.0)]),
]
COUNTER = "kubex_gpu_container_sm_utilization_percent_seconds_total"
FOOTPRINT = "kubex_gpu_container_memory_footprint_percent"
RECORDED = "kubex_gpu_container_sm_utilization_percent"


def labels(pod, container, cid, uuid):
    return (f'node="gpu-node-1",namespace="ml",pod="{pod}",container="{container}",'
            f'container_id="{cid}",gpu_allocation_type="KaiScheduler",gpu_uuid="{uuid}",'
            f'gpu_model="NVIDIA A100-SXM4-80GB"')


scrapes = range(START - 60 + SCRAPE_PHASE, END, 60)
raw = [f"# TYPE {COUNTER} counter", f"# HELP {COUNTER} Accumulated utilization percent-seconds"]
for pod, c, cid, devices in CONTAINERS:
    for uuid, sm, _ in devices:
        for i, t in enumerate(scrapes):
            raw.append(f"{COUNTER}{{{labels(pod, c, cid, uuid)}}} {sm * 60 * i:.1f} {t}")
raw += [f"# TYPE {FOOTPRINT} gauge", f"# HELP {FOOTPRINT} Percent"]
for pod, c, cid, devices in CONTAINERS:
    for uuid, _, mem in devices:
        for t in scrapes:
            raw.append(f"{FOOTPRINT}{{{labels(pod, c, cid, uuid)}}} {mem} {t}")

# The recording rule, evaluated by Prometheus over the raw series every 60 s.
rule = [r for g in __import__("yaml").safe_load(open(os.path.join(
    root, "manifests/monitoring/gpu-rules.yaml")))["groups"] for r in g["rules"]
    if r["record"] == RECORDED and "labels" not in r][0]["expr"]
work = tempfile.mkdtemp()
try:
    with open(os.path.join(work, "raw.om"), "w") as f:
        f.write("\n".join(raw) + "\n# EOF\n")
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                    os.path.join(work, "raw.om"), os.path.join(work, "data")], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global: {scrape_interval: 1h}\nscrape_configs: []\n")
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    prom = subprocess.Popen(["prometheus", f"--config.file={work}/prometheus.yml",
                             f"--storage.tsdb.path={work}/data",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/-/ready"); break
            except Exception:
                time.sleep(0.1)
        q = urllib.parse.urlencode({"query": rule, "start": START, "end": END, "step": 60})
        result = json.load(urllib.request.urlopen(url + "/api/v1/query_range?" + q))["data"]["result"]
    finally:
        prom.terminate(); prom.wait()
finally:
    shutil.rmtree(work)

out = [l for l in raw]
out += [f"# TYPE {RECORDED} gauge",
        f"# HELP {RECORDED} Recorded by gpu-rules.yaml: rate of {COUNTER}"]
for series in sorted(result, key=lambda s: sorted(s["metric"].items())):
    m = ",".join(f'{k}="{v}"' for k, v in sorted(series["metric"].items()))
    for t, v in series["values"]:
        out.append(f"{RECORDED}{{{m}}} {v} {int(t)}")
with open(os.path.join(here, "metrics.om"), "w") as f:
    f.write("\n".join(out) + "\n# EOF\n")
