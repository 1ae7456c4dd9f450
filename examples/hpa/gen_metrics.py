#!/usr/bin/env python3
"""Writes examples/hpa/manifests/pods.yaml and examples/hpa/metrics.om: one hour of cAdvisor
samples every 15 s ending at 2026-01-01T12:00:00Z: CPU usage 0.7 cores, 300 MiB working set."""
import os

END = 1767268800
here = os.path.dirname(os.path.abspath(__file__))
pods = ["web-6d4b8c7f9-a1b2c", "web-6d4b8c7f9-d3e4f", "web-6d4b8c7f9-g5h6i"]
docs = []
for p in pods:
    docs.append(f"""apiVersion: v1
kind: Pod
metadata:
  name: {p}
  namespace: shop
  labels: {{app: web, pod-template-hash: 6d4b8c7f9}}
  ownerReferences:
    - {{apiVersion: apps/v1, kind: ReplicaSet, name: web-6d4b8c7f9, uid: 00000000-0000-4000-8000-0000000000a1, controller: true}}
spec:
  containers:
    - name: app
      image: ghcr.io/example/web:1.0
      resources:
        requests: {{cpu: 1000m, memory: 512Mi}}
status:
  phase: Running
  startTime: "2026-01-01T09:00:00Z"
""")
with open(os.path.join(here, "manifests", "pods.yaml"), "w") as f:
    f.write("---\n".join(docs))

start = END - 3600 - 300
lines = ["# TYPE container_cpu_usage_seconds counter"]
for p in pods:
    for i, t in enumerate(range(start, END + 1, 15)):
        lines.append(f'container_cpu_usage_seconds_total{{namespace="shop",pod="{p}",container="app"}} {1000 + 0.7 * 15 * i:.3f} {t}')
lines.append("# TYPE container_memory_working_set_bytes gauge")
for p in pods:
    for t in range(start, END + 1, 15):
        lines.append(f'container_memory_working_set_bytes{{namespace="shop",pod="{p}",container="app"}} {300 * 1024 * 1024} {t}')
lines.append("# EOF")
with open(os.path.join(here, "metrics.om"), "w") as f:
    f.write("\n".join(lines) + "\n")
