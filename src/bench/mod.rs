//! The benchmarks' harness (`kerf bench`, docs/performance.md): synthetic clusters and their
//! metric sources, and the alternative decoders the decode bench compares kerf's with. Nothing
//! outside `kerf bench` and the tests uses it.

pub mod decoders;
pub mod resources;
pub mod scale;
