//! Offline checks of the API: CRD drift, defaults, validation, the docs and seeds, and the shipped manifests (kubectl kustomize, kubernetes-validate).
//!
//! One test binary per IO edge: each links the dependency tree once (see DEVELOPERS.md).

mod api_crd_drift;
mod api_defaults;
mod api_docs;
mod api_seed;
mod api_validation;
mod core_dependencies;
mod design_docs;
mod function_length;
mod gitops_docs;
mod manifests_validate;
mod module_map;
#[path = "../support/resize_oracle.rs"]
mod resize_oracle;
mod resize_rules;
