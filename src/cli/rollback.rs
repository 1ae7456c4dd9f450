//! `kerf rollback <kind>/<name> -n <namespace>`: asks kerf to roll a workload back. It sets the
//! `rightsizing.kubex.ai/rollback` annotation (a merge patch, with the caller's own credentials);
//! the kerf leader then restores the original requests and HPA target in one step, removes the
//! annotation and stops applying to the workload until its RightsizingRecommendation is deleted.

use ::kube::api::{Api, DynamicObject, Patch, PatchParams};
use clap::Args;
use jiff::Timestamp;
use serde_json::json;

use crate::api::WorkloadKind;
use crate::core::model::{ANNOTATION_ROLLBACK, WorkloadKey};
use crate::reconcile::recommendation_name;
use crate::writers::kube::workload_resource;

/// Field manager of the annotation `kerf rollback` sets.
pub const ROLLBACK_FIELD_MANAGER: &str = "kerf-rollback";

#[derive(Args, Debug, Clone)]
pub struct RollbackArgs {
    /// The workload: `<kind>/<name>`, e.g. `deployment/web` (kinds: deployment, statefulset,
    /// daemonset, job, cronjob; plural and short names work too).
    pub workload: String,
    /// Namespace (default: the current kubeconfig context's).
    #[arg(short = 'n', long, env = "KERF_NAMESPACE")]
    pub namespace: Option<String>,
}

/// `deployment/web`, `deploy/web`, `StatefulSets/db`, `deployment.apps/web` → (kind, name).
pub fn parse_workload(text: &str) -> anyhow::Result<(WorkloadKind, String)> {
    let Some((kind, name)) = text.split_once('/') else {
        anyhow::bail!("{text:?}: expected <kind>/<name>, e.g. deployment/web");
    };
    let kind = kind.split('.').next().unwrap_or_default().to_lowercase();
    let kind = match kind.as_str() {
        "deploy" | "deployment" | "deployments" => WorkloadKind::Deployment,
        "sts" | "statefulset" | "statefulsets" => WorkloadKind::StatefulSet,
        "ds" | "daemonset" | "daemonsets" => WorkloadKind::DaemonSet,
        "job" | "jobs" => WorkloadKind::Job,
        "cj" | "cronjob" | "cronjobs" => WorkloadKind::CronJob,
        other => anyhow::bail!(
            "{text:?}: {other:?} is not a workload kind (deployment, statefulset, daemonset, job, cronjob)"
        ),
    };
    if name.is_empty() || name.contains('/') {
        anyhow::bail!("{text:?}: expected <kind>/<name>, e.g. deployment/web");
    }
    Ok((kind, name.to_string()))
}

/// Sets the rollback annotation on the workload (value: the request time) and says what
/// happens next. Errors when the workload does not exist.
pub async fn request_rollback(
    client: ::kube::Client,
    key: &WorkloadKey,
    now: Timestamp,
) -> anyhow::Result<String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &key.namespace, &workload_resource(key.kind));
    let what = format!("{} {}/{}", key.kind, key.namespace, key.name);
    let live = api
        .get_opt(&key.name)
        .await
        .map_err(|e| anyhow::anyhow!("reading {what}: {e}"))?;
    let Some(live) = live else {
        anyhow::bail!("{what} not found");
    };
    let pending = live
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ROLLBACK))
        .is_some_and(|v| !v.trim().is_empty());
    let value = crate::core::model::rfc3339_secs(now);
    let body = json!({"metadata": {"annotations": {ANNOTATION_ROLLBACK: value}}});
    let params = PatchParams {
        field_manager: Some(ROLLBACK_FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&key.name, &params, &Patch::Merge(&body))
        .await
        .map_err(|e| anyhow::anyhow!("annotating {what}: {e}"))?;
    let again = if pending {
        " (a rollback was already pending)"
    } else {
        ""
    };
    Ok(format!(
        "{what}: annotated {ANNOTATION_ROLLBACK}={value}{again}.\n\
         At its next cycle the kerf leader restores the original requests and HPA target together,\n\
         removes the annotation and stops applying to this workload (RightsizingRecommendation\n\
         phase audit-only, reason RolledBack). To let kerf apply again:\n  \
         kubectl delete rightsizingrecommendation {} -n {}",
        recommendation_name(key),
        key.namespace
    ))
}

pub async fn run(args: RollbackArgs) -> anyhow::Result<()> {
    let (kind, name) = parse_workload(&args.workload)?;
    let client = ::kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("no Kubernetes client configuration: {e}"))?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let key = WorkloadKey::new(namespace, kind, name);
    println!(
        "{}",
        request_rollback(client, &key, Timestamp::now()).await?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_arguments_parse_like_kubectl() {
        for (text, kind) in [
            ("deployment/web", WorkloadKind::Deployment),
            ("Deployment/web", WorkloadKind::Deployment),
            ("deploy/web", WorkloadKind::Deployment),
            ("deployments.apps/web", WorkloadKind::Deployment),
            ("sts/web", WorkloadKind::StatefulSet),
            ("daemonset/web", WorkloadKind::DaemonSet),
            ("jobs/web", WorkloadKind::Job),
            ("cj/web", WorkloadKind::CronJob),
        ] {
            assert_eq!(
                parse_workload(text).unwrap(),
                (kind, "web".into()),
                "{text}"
            );
        }
        for bad in ["web", "pod/web", "deployment/", "deployment/a/b"] {
            let e = parse_workload(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!(
            parse_workload("pod/web")
                .unwrap_err()
                .to_string()
                .contains("not a workload kind")
        );
    }
}
