//! KAI-Scheduler's validating admission rule for GPU requests, written independently of kerf
//! from KAI's source, as a test oracle: every pod kerf patches must pass it.
//!
//! Source: github.com/NVIDIA/KAI-Scheduler, commit 72de64fc8eca10fa8cca26a20156178f3edbe092
//! (main, 2026-03-07; the same file at tag v0.20.1, 5922dc7), files
//! `pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go` (`ValidateGpuRequests`)
//! and `pkg/binder/plugins/gpusharing/gpu_sharing.go` (`Validate`, which refuses any sharing
//! request while `global.gpuSharing` is off — not modelled: install docs turn sharing on),
//! names from `pkg/common/constants/constants.go`. KAI registers it with failurePolicy Fail
//! for pods whose `schedulerName` is KAI's.
//!
//! In KAI's words, in its order (the first failing check is the answer):
//! 1. `mps: "true"` without `gpu-fraction` or `gpu-memory` → "MPS is only supported with GPU
//!    fraction request";
//! 2. `gpu-fraction` and a whole-GPU limit (`nvidia.com/gpu` in the *limits* of any container or
//!    init container: `getFirstGPULimit`) → "cannot have both GPU fraction request and whole GPU
//!    resource request/limit";
//! 3. `gpu-memory` with `gpu-fraction` or a whole-GPU limit → "cannot request both GPU and GPU
//!    memory";
//! 4. `gpu-fraction-num-devices` without `gpu-fraction` or `gpu-memory` → "cannot request multiple
//!    fractional devices without specifying fraction portion or gpu-memory";
//! 5. `gpu-memory` not an unsigned integer > 0 (Go `strconv.ParseUint(s, 10, 64)`);
//! 6. `gpu-fraction` not a float in (0, 1) (Go `strconv.ParseFloat(s, 64)`);
//! 7. `gpu-fraction-num-devices` not an unsigned integer > 0.
//!
//! KAI reads only limits for rule 2 (Kubernetes requires an extended resource's request to
//! equal its limit, and defaults a missing request to the limit).

#![allow(dead_code)]

use serde_json::Value;

/// Go's `strconv.ParseUint(s, 10, 64)`: ASCII digits only (no sign, no spaces, no `_`).
fn go_parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Go's `strconv.ParseFloat(s, 64)` for the texts a fraction is written as: no surrounding
/// spaces (Rust's parser refuses them too); `inf`/`nan` parse but fail the range check.
fn go_parse_float(s: &str) -> Option<f64> {
    s.parse().ok()
}

/// `append(pod.Spec.Containers, pod.Spec.InitContainers...)`
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers"]
        .into_iter()
        .filter_map(|k| pod["spec"][k].as_array())
        .flatten()
}

fn has_whole_gpu_limit(pod: &Value) -> bool {
    containers(pod).any(|c| c["resources"]["limits"].get("nvidia.com/gpu").is_some())
}

/// KAI's `ValidateGpuRequests` on a pod as JSON: `Ok` when KAI admits it, else KAI's message.
pub fn kai_validate_gpu_requests(pod: &Value) -> Result<(), String> {
    let ann = |k: &str| {
        pod["metadata"]["annotations"]
            .get(k)
            .and_then(Value::as_str)
    };
    let fraction = ann("gpu-fraction");
    let memory = ann("gpu-memory");
    let devices = ann("gpu-fraction-num-devices");
    let mps = ann("mps");
    let whole = has_whole_gpu_limit(pod);
    let fractional = fraction.is_some() || memory.is_some();
    if !fractional && mps == Some("true") {
        return Err("MPS is only supported with GPU fraction request".into());
    }
    if fraction.is_some() && whole {
        return Err(
            "cannot have both GPU fraction request and whole GPU resource request/limit".into(),
        );
    }
    if memory.is_some() && (fraction.is_some() || whole) {
        return Err("cannot request both GPU and GPU memory".into());
    }
    if devices.is_some() && !fractional {
        return Err("cannot request multiple fractional devices without specifying fraction portion or gpu-memory".into());
    }
    if let Some(m) = memory {
        if go_parse_uint(m).is_none_or(|m| m == 0) {
            return Err(
                "gpu-memory annotation value must be a positive integer greater than 0".into(),
            );
        }
    }
    if let Some(f) = fraction {
        if go_parse_float(f).is_none_or(|f| !(f > 0.0 && f < 1.0)) {
            return Err(
                "gpu-fraction annotation value must be a positive number smaller than 1.0".into(),
            );
        }
    }
    if let Some(n) = devices {
        if go_parse_uint(n).is_none_or(|n| n == 0) {
            return Err(
                "fraction count annotation value must be a positive integer greater than 0".into(),
            );
        }
    }
    Ok(())
}

/// Whether KAI's webhook sees the pod at all: its configuration matches on the scheduler name
/// (`buildSchedulerNameMatchConditions`, `pkg/operator/operands/admission/resources.go`).
pub fn validated_by_kai(pod: &Value, kai_scheduler_name: &str) -> bool {
    pod["spec"]["schedulerName"].as_str() == Some(kai_scheduler_name)
}

/// The check every test that receives a kerf patch runs: a pod KAI would accept before kerf's
/// patch is one KAI accepts after it.
pub fn assert_kai_accepts_patched(original: &Value, patched: &Value) {
    if kai_validate_gpu_requests(original).is_err() {
        return;
    }
    if let Err(why) = kai_validate_gpu_requests(patched) {
        panic!("KAI refuses the patched pod: {why}\noriginal: {original}\npatched: {patched}");
    }
}
