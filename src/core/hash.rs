//! The hash maps and sets of kerf's own keys (workloads, pods, policies, series): foldhash, not
//! std's SipHash, which was a seventh of the work of a 150,000-pod cycle. The keys are object
//! names users choose; foldhash seeds itself at random per process, so collisions cannot be
//! prepared ahead of time (the same trade-off as hashbrown's default hasher).
pub use foldhash::fast::RandomState;
pub use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
