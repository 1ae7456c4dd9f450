//! Standalone mode: objects from a directory of YAML manifests instead of the API server.
//! (Loader and evaluation land with `kerf recommend`.)
