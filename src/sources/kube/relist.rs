//! The watcher every watch task reads, with the retry pacing the API server needs.
//!
//! kube-runtime's own backoff (`WatchStreamExt::default_backoff`) is reset by any `Ok` item, and
//! its watcher yields `Ok(Event::Init)` before every list: a list that keeps failing is asked
//! again every 0.8–1.6 s forever (a kind whose CRD is not installed, or the API server down,
//! costs it about one list a second per kind and replica). Here only an event that shows the
//! list or the watch working (an object, the end of a list) resets the backoff, the delay grows
//! exponentially with jitter, up to [`MAX_DELAY`] — [`MAX_DELAY_NOT_SERVED`] for a resource the
//! API server does not serve (404) — and a watch the API server answers with HTTP 410 as a plain
//! status (not a watch `ERROR` event, which the watcher handles itself: a proxy or an aggregated
//! server sends it) starts over with a list instead of retrying the expired resourceVersion.

use std::fmt::Debug;
use std::hash::BuildHasher;
use std::time::Duration;

use ::kube::Resource;
use ::kube::api::Api;
use ::kube::runtime::watcher;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;

/// The first retry's delay (kube-runtime's default backoff starts there too).
pub const FIRST_DELAY: Duration = Duration::from_millis(800);
/// The longest delay between two failing lists or watches.
pub const MAX_DELAY: Duration = Duration::from_secs(30);
/// The longest delay between two lists of a resource the API server does not serve (a CRD
/// that is not installed): a missing CRD costs the API server a list every few minutes.
pub const MAX_DELAY_NOT_SERVED: Duration = Duration::from_secs(300);

/// The delay before retrying after the `failures`-th failure in a row (from 1): doubling from
/// [`FIRST_DELAY`] up to `max`, then spread by ±20 % with `jitter` (in [0, 1)) so that replicas
/// and kinds that failed together do not retry together.
pub fn list_retry_delay(failures: u32, max: Duration, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    let delay = FIRST_DELAY.saturating_mul(1 << doublings).min(max);
    delay.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

/// The HTTP status of a list or watch the API server refused.
pub fn refused_with(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(::kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// Whether a list or watch failed because the API server does not serve the resource.
pub fn not_served(e: &watcher::Error) -> bool {
    refused_with(e) == Some(404)
}

/// A watch refused with HTTP 410 outside a watch event: kube-runtime's watcher would retry
/// the same resourceVersion forever; it must list again.
fn gone_outside_an_event(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::WatchStartFailed(::kube::Error::Api(s))
            | watcher::Error::WatchFailed(::kube::Error::Api(s)) if s.code == 410
    )
}

struct State<K: 'static> {
    api: Api<K>,
    config: watcher::Config,
    inner: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    failures: u32,
    pause: Option<Duration>,
    jitter: foldhash::fast::RandomState,
}

/// kube-runtime's [`watcher`] of `api`, paced and relisting as the module says.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let inner = watcher(api.clone(), config.clone()).boxed();
    let state = State {
        api,
        config,
        inner,
        failures: 0,
        pause: None,
        jitter: foldhash::fast::RandomState::default(),
    };
    futures::stream::unfold(state, |mut st| async move {
        if let Some(pause) = st.pause.take() {
            tokio::time::sleep(pause).await;
        }
        let item = st.inner.next().await?;
        match &item {
            // Only announces a list, which may fail again.
            Ok(watcher::Event::Init) => {}
            Ok(_) => st.failures = 0,
            Err(e) => {
                let relist = gone_outside_an_event(e);
                if relist {
                    st.inner = watcher(st.api.clone(), st.config.clone()).boxed();
                }
                st.failures = st.failures.saturating_add(1);
                let max = if not_served(e) {
                    MAX_DELAY_NOT_SERVED
                } else {
                    MAX_DELAY
                };
                let spread = st.jitter.hash_one(st.failures) as f64 / u64::MAX as f64;
                let pause = list_retry_delay(st.failures, max, spread);
                st.pause = Some(pause);
                // The restart's own span: which resource, how many failures in a row, how long
                // until the next attempt, and whether it lists again from scratch.
                tracing::debug_span!(
                    "watch_restart",
                    resource = %st.api.resource_url(),
                    failures = st.failures,
                    pause_ms = pause.as_millis() as u64,
                    relist,
                )
                .in_scope(|| tracing::debug!(error = %e, "watch restarts"));
            }
        }
        Some((item, st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_retry_delay_doubles_to_its_cap_with_jitter_of_a_fifth() {
        let mid = |n, max| list_retry_delay(n, max, 0.5);
        assert_eq!(mid(1, MAX_DELAY), Duration::from_millis(800));
        assert_eq!(mid(2, MAX_DELAY), Duration::from_millis(1600));
        assert_eq!(mid(6, MAX_DELAY), Duration::from_millis(25_600));
        assert_eq!(mid(7, MAX_DELAY), MAX_DELAY);
        assert_eq!(mid(1_000, MAX_DELAY), MAX_DELAY);
        assert_eq!(mid(9, MAX_DELAY_NOT_SERVED), Duration::from_millis(204_800));
        assert_eq!(mid(10, MAX_DELAY_NOT_SERVED), MAX_DELAY_NOT_SERVED);
        assert_eq!(
            list_retry_delay(10, MAX_DELAY_NOT_SERVED, 0.0),
            Duration::from_secs(240)
        );
        let highest = list_retry_delay(10, MAX_DELAY_NOT_SERVED, 0.999_999);
        assert!(highest > Duration::from_secs(359) && highest < Duration::from_secs(360));
    }
}
