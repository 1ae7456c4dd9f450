#!/usr/bin/env python3
"""Writes examples/manifests/pods.yaml and examples/metrics.om: 20 minutes of GPU samples (and
the cAdvisor CPU and memory series of the same containers) every 15 s ending at
2026-01-01T12:00:00Z (use `--at 2026-01-01T12:00:00Z`). The pods carry their templates' requests
(examples/manifests/workloads.yaml), as pods created from them do."""
import os

END = 1767268800  # 2026-01-01T12:00:00Z
here = os.path.dirname(os.path.abspath(__file__))

# Per container: (name, cpu request, memory request, cpu usage in cores, working set in MiB).
LLM = [("inference", "2", "8Gi", 1.2, 6144), ("proxy", "100m", "64Mi", 0.05, 40)]
EMBEDDER = [("encoder", "1", "4Gi", 0.4, 2560)]
pods = [
    # (name, owner kind, owner name, hash label, fraction, containers)
    ("llm-5f7c9d8b6-x2k4p", "ReplicaSet", "llm-5f7c9d8b6", "5f7c9d8b6", "0.5", LLM),
    ("llm-5f7c9d8b6-q8w1z", "ReplicaSet", "llm-5f7c9d8b6", "5f7c9d8b6", "0.5", LLM),
    ("embedder-6b8d7f9c4-h7j2m", "ReplicaSet", "embedder-6b8d7f9c4", "6b8d7f9c4", "0.9", EMBEDDER),
]
docs = []
for name, okind, oname, h, frac, containers in pods:
    app = name.split("-")[0]
    cs = "\n".join(
        f"    - name: {c}\n      image: ghcr.io/example/{c}:1.0\n"
        f"      resources:\n        requests: {{cpu: \"{cpu}\", memory: {mem}}}"
        for c, cpu, mem, _, _ in containers
    )
    docs.append(f"""apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  labels: {{app: {app}, tier: gpu-inference, pod-template-hash: "{h}"}}
  annotations:
    gpu-fraction: "{frac}"
  ownerReferences:
    - {{apiVersion: apps/v1, kind: {okind}, name: {oname}, uid: 00000000-0000-4000-8000-00000000000{len(docs)}, controller: true}}
spec:
  schedulerName: kai-scheduler
  containers:
{cs}
status:
  phase: Running
  startTime: "2026-01-01T10:00:00Z"
""")
with open(os.path.join(here, "manifests", "pods.yaml"), "w") as f:
    f.write("# Running pods (with status) of the example workloads.\n" + "---\n".join(docs))

def series(metric, pod, container, value_at):
    return [f'{metric}{{namespace="ml",pod="{pod}",container="{container}"}} {value_at(t):.10g} {t}'
            for t in range(END - 20 * 60, END + 1, 15)]

sm = "kubex_gpu_container_sm_utilization_percent"
mem = "kubex_gpu_container_memory_footprint_percent"
lines = [f"# TYPE {sm} gauge", f"# HELP {sm} SM utilization, percent of one whole GPU."]
# llm pod 1 peaks at 70 % of a whole GPU on its 0.5 share (0.7 > 0.625): upsize to 0.84.
lines += series(sm, "llm-5f7c9d8b6-x2k4p", "inference", lambda t: 70 if (t // 60) % 3 == 0 else 55)
lines += series(sm, "llm-5f7c9d8b6-q8w1z", "inference", lambda t: 40)
lines += series(sm, "embedder-6b8d7f9c4-h7j2m", "encoder", lambda t: 20)
lines += [f"# TYPE {mem} gauge", f"# HELP {mem} GPU memory footprint, percent of the allocation."]
lines += series(mem, "llm-5f7c9d8b6-x2k4p", "inference", lambda t: 80)
lines += series(mem, "llm-5f7c9d8b6-q8w1z", "inference", lambda t: 75)
lines += series(mem, "embedder-6b8d7f9c4-h7j2m", "encoder", lambda t: 30)
# cAdvisor's series of the same containers: a CPU counter (seconds) and the working set.
cpu = "container_cpu_usage_seconds"
lines.append(f"# TYPE {cpu} counter")
for name, *_, containers in pods:
    for c, _, _, cores, _ in containers:
        lines += series(f"{cpu}_total", name, c, lambda t: 1000 + cores * (t - (END - 20 * 60)))
ws = "container_memory_working_set_bytes"
lines.append(f"# TYPE {ws} gauge")
for name, *_, containers in pods:
    for c, _, _, _, mib in containers:
        lines += series(ws, name, c, lambda t: mib * 1024 * 1024)
lines.append("# EOF")
with open(os.path.join(here, "metrics.om"), "w") as f:
    f.write("\n".join(lines) + "\n")
