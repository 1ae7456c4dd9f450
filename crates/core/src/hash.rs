//! The hash maps and sets of kerf's own keys (workloads, pods, policies, series): foldhash, not
//! std's SipHash, which costs a large cycle noticeably (docs/performance.md). foldhash seeds itself
//! once per process (from addresses and the clock): its resistance to keys chosen to collide is
//! minimal, the trade hashbrown's default hasher makes too, and acceptable for names that only
//! users allowed to create workloads choose. No output depends on the seed: nothing kerf
//! prints or writes follows these maps' order (with std's hasher it was random per process too).
pub use foldhash::fast::RandomState;
pub use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
