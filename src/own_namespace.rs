//! kerf's own namespace (docs/design/runtime.md#r12): `POD_NAMESPACE` (the downward API), else
//! the namespace the kubelet mounts with the service-account token. It is always protected —
//! every mode adds it to `GlobalConfiguration.spec.protectedNamespaces`
//! ([`crate::api::GlobalConfigurationSpec::protect`]) — and in-cluster it holds the Lease.

use std::path::Path;

/// Where the kubelet mounts the pod's namespace with its service-account token.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The namespace from `pod_namespace` (the `POD_NAMESPACE` variable), else from the first line
/// of `namespace_file`; `None` when neither names one (outside a pod).
pub fn own_namespace(pod_namespace: Option<&str>, namespace_file: &Path) -> Option<String> {
    let named = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    pod_namespace.and_then(named).or_else(|| {
        std::fs::read_to_string(namespace_file)
            .ok()
            .and_then(|text| text.lines().next().and_then(named))
    })
}

/// [`own_namespace`] from this process's `POD_NAMESPACE` and `namespace_file`.
pub fn detect(namespace_file: &Path) -> Option<String> {
    own_namespace(
        std::env::var("POD_NAMESPACE").ok().as_deref(),
        namespace_file,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/design/runtime.md#r12: `POD_NAMESPACE`, else the service-account namespace file.
    #[test]
    fn kerfs_own_namespace_is_pod_namespace_else_the_service_account_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("namespace");
        assert_eq!(own_namespace(None, &file), None, "no file, no variable");
        std::fs::write(&file, "platform\n").unwrap();
        assert_eq!(own_namespace(None, &file).as_deref(), Some("platform"));
        assert_eq!(own_namespace(Some(""), &file).as_deref(), Some("platform"));
        assert_eq!(
            own_namespace(Some("kerf-prod"), &file).as_deref(),
            Some("kerf-prod")
        );
        std::fs::write(&file, "  \n").unwrap();
        assert_eq!(own_namespace(None, &file), None);
    }
}
