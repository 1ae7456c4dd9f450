//! What a client may hold on either listener, and for how long (`docs/install.md`, "Webhook
//! limits"; `docs/design/runtime.md#r16`).
//!
//! Every phase of a connection has a deadline: the TLS handshake, the first request (hyper-util's
//! HTTP/1-or-2 detection read included), a request's headers, its whole body, and the idle time
//! between requests (HTTP/1 keep-alive and HTTP/2 alike). A watchdog per connection
//! ([`Activity`], driven by `drive` in `mod.rs`) sees which phase the connection is in from the
//! bytes read below hyper and the requests in flight above it, because hyper has no idle timeout
//! for HTTP/2 and its HTTP/1 `header_read_timeout` also runs while a keep-alive connection waits
//! for its next request (`hyper` 1.12 `src/proto/h1/conn.rs`, `poll_read_head`), which would tie
//! the idle time to the header time.
//!
//! Memory is bounded twice: at most `max_connections` connections per listener (beyond it the
//! accept loop waits, so new connections wait in the kernel's backlog), and at most
//! `max_buffered_body_bytes` of request bodies held at once over both listeners. A body reserves
//! its declared length before its first byte is read; one that does not fit is refused at once
//! with 503, so a review that does fit never waits behind stalled ones.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, StatusCode, Version, header};
use bytes::BytesMut;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::telemetry::{ConnectionCloseLabels, Metrics};

use super::MAX_BODY_BYTES;

/// The smallest header limit hyper accepts for HTTP/1 (`max_buf_size` panics below it).
pub const MIN_HEADER_BYTES: usize = 8192;

/// How long a connection whose deadline passed gets to close cleanly (HTTP/2: GOAWAY sent and
/// read) before it is dropped. It has no request in flight by then.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The limits of both listeners (`kerf serve` flags; the defaults are documented in
/// `docs/install.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// TLS handshake, from the accepted TCP connection (webhook listener only).
    pub tls_handshake_timeout: Duration,
    /// From the connection being ready (after the handshake) to the first request's headers.
    pub first_request_timeout: Duration,
    /// From a request's first byte to the end of its headers (HTTP/1; an HTTP/2 request's
    /// headers come in one frame, bounded by the idle timeout).
    pub header_read_timeout: Duration,
    /// From the end of the headers to the end of the body (answered 408).
    pub body_read_timeout: Duration,
    /// From an answer to the next request on the same connection (HTTP/1 keep-alive, HTTP/2).
    pub idle_timeout: Duration,
    /// Connections served at once on the webhook listener.
    pub max_connections: usize,
    /// Connections served at once on the health listener.
    pub health_max_connections: usize,
    /// Request line and headers (HTTP/1), header list (HTTP/2); beyond it 431.
    pub max_header_bytes: usize,
    /// Request bodies held in memory at once, both listeners together; beyond it 503.
    pub max_buffered_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            tls_handshake_timeout: Duration::from_secs(10),
            first_request_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 512,
            health_max_connections: 32,
            max_header_bytes: 16 * 1024,
            max_buffered_body_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// Every limit usable, or an error naming the flag and the fix.
    pub fn validate(&self) -> Result<(), LimitError> {
        let timeouts = [
            (
                self.tls_handshake_timeout,
                "--tls-handshake-timeout-seconds",
            ),
            (
                self.first_request_timeout,
                "--first-request-timeout-seconds",
            ),
            (self.header_read_timeout, "--header-read-timeout-seconds"),
            (self.body_read_timeout, "--body-read-timeout-seconds"),
            (self.idle_timeout, "--idle-timeout-seconds"),
        ];
        for (t, flag) in timeouts {
            if t.is_zero() {
                return Err(LimitError::at_least(
                    flag,
                    "1 (a connection needs time to be served)".into(),
                ));
            }
        }
        if self.max_connections == 0 {
            return Err(LimitError::at_least("--max-connections", "1".into()));
        }
        if self.health_max_connections == 0 {
            return Err(LimitError::at_least("--health-max-connections", "1".into()));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(LimitError::at_least(
                "--max-header-bytes",
                format!(
                    "{MIN_HEADER_BYTES} (got {}): the HTTP/1 server cannot read headers into a \
                     smaller buffer",
                    self.max_header_bytes
                ),
            ));
        }
        if self.max_header_bytes > u32::MAX as usize {
            return Err(LimitError::Below4Gi("--max-header-bytes"));
        }
        if self.max_buffered_body_bytes < MAX_BODY_BYTES {
            return Err(LimitError::at_least(
                "--max-buffered-body-bytes",
                format!(
                    "{MAX_BODY_BYTES} (3Mi, the largest review body), got {}",
                    self.max_buffered_body_bytes
                ),
            ));
        }
        if self.max_buffered_body_bytes > u32::MAX as usize {
            return Err(LimitError::Below4Gi("--max-buffered-body-bytes"));
        }
        Ok(())
    }
}

/// A webhook limit that cannot be used: the flag and its bound.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{flag} must be at least {bound}")]
    AtLeast { flag: &'static str, bound: String },
    #[error("{0} must be below 4Gi")]
    Below4Gi(&'static str),
}

impl LimitError {
    fn at_least(flag: &'static str, bound: String) -> Self {
        LimitError::AtLeast { flag, bound }
    }
}

/// The phase of a connection a limit cut (the `phase` label of `kerf_connections_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Handshake,
    FirstRequest,
    Headers,
    Body,
    Idle,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Handshake => "handshake",
            Phase::FirstRequest => "first_request",
            Phase::Headers => "headers",
            Phase::Body => "body",
            Phase::Idle => "idle",
        }
    }
}

/// Counts one connection or request cut by a limit.
pub fn count_closed(metrics: &Metrics, listener: &'static str, phase: Phase, reason: &'static str) {
    metrics
        .connections_closed
        .get_or_create(&ConnectionCloseLabels {
            listener,
            phase: phase.as_str(),
            reason,
        })
        .inc();
}

const NONE: u64 = u64::MAX;

/// What one connection is doing, shared by its reader ([`Watched`]), its requests
/// ([`Activity::request`]) and its watchdog.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    requests: AtomicU64,
    /// Nanoseconds since `start` at which the last answer was decided.
    last_answer: AtomicU64,
    /// Nanoseconds since `start` of the first byte read while no request was in flight
    /// (an HTTP/1 request's head arriving), `NONE` when none.
    head_started: AtomicU64,
    /// HTTP/2: bytes between requests are frames of the connection (PING, SETTINGS), not heads.
    http2: std::sync::atomic::AtomicBool,
    changed: Notify,
}

/// The connection's next deadline and the phase it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    pub at: Instant,
    pub phase: Phase,
}

impl Activity {
    pub fn new(start: Instant) -> Arc<Self> {
        Arc::new(Self {
            start,
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            last_answer: AtomicU64::new(NONE),
            head_started: AtomicU64::new(NONE),
            http2: std::sync::atomic::AtomicBool::new(false),
            changed: Notify::new(),
        })
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.start).as_nanos()).unwrap_or(NONE - 1)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.start + Duration::from_nanos(nanos)
    }

    /// Resolves when a request started or ended, or a head began to arrive.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The deadline that applies now: none while a request is in flight (its body has a
    /// deadline of its own), else the first-request, header or idle one.
    pub fn deadline(&self, limits: &Limits) -> Option<Deadline> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let head = self.head_started.load(Ordering::Acquire);
        let headers = (head != NONE).then(|| Deadline {
            at: self.at(head) + limits.header_read_timeout,
            phase: Phase::Headers,
        });
        let waiting = if self.requests.load(Ordering::Acquire) == 0 {
            Deadline {
                at: self.start + limits.first_request_timeout,
                phase: Phase::FirstRequest,
            }
        } else {
            let last = self.last_answer.load(Ordering::Acquire);
            Deadline {
                at: self.at(if last == NONE { 0 } else { last }) + limits.idle_timeout,
                phase: Phase::Idle,
            }
        };
        Some(match headers {
            // The first request's headers end at whichever comes first.
            Some(h) if waiting.phase == Phase::FirstRequest => {
                if h.at < waiting.at {
                    h
                } else {
                    waiting
                }
            }
            // A head arriving after an answer ends the idle time.
            Some(h) => h,
            None => waiting,
        })
    }

    /// A request reached the service; the returned guard marks its answer when dropped.
    pub fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(NONE, Ordering::Release);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    fn bytes_read(&self, first: &[u8], seen: &mut Preface) {
        if seen.check(first) {
            self.http2.store(true, Ordering::Release);
        }
        // Until the first bytes told HTTP/1 from HTTP/2 they are not a head yet.
        if !seen.decided
            || self.http2.load(Ordering::Acquire)
            || self.in_flight.load(Ordering::Acquire) > 0
            || self.head_started.load(Ordering::Acquire) != NONE
        {
            return;
        }
        self.head_started
            .store(self.nanos(Instant::now()), Ordering::Release);
        self.changed.notify_one();
    }
}

/// One request in flight on a connection.
pub struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_answer
            .store(a.nanos(Instant::now()), Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
        a.changed.notify_one();
    }
}

/// Whether a connection starts with the HTTP/2 preface (RFC 9113 §3.4), decided on its first
/// bytes however they are split across reads.
#[derive(Debug, Default)]
struct Preface {
    matched: usize,
    decided: bool,
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl Preface {
    /// True once, when the preface is complete.
    fn check(&mut self, bytes: &[u8]) -> bool {
        if self.decided {
            return false;
        }
        let rest = &H2_PREFACE[self.matched..];
        let n = rest.len().min(bytes.len());
        if bytes[..n] != rest[..n] {
            self.decided = true;
            return false;
        }
        self.matched += n;
        if self.matched == H2_PREFACE.len() {
            self.decided = true;
            return true;
        }
        false
    }
}

/// The connection's stream as hyper reads it, telling [`Activity`] when bytes arrive.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
    preface: Preface,
}

impl<S> Watched<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            preface: Preface::default(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity
                .bytes_read(&buf.filled()[before..], &mut this.preface);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The bytes of request bodies held at once (both listeners share one).
#[derive(Clone, Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// Bytes of the budget held by one body until its request was answered.
pub struct Reserved {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
    metrics: Arc<Metrics>,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.metrics
            .request_body_bytes_buffered
            .dec_by(self.bytes as i64);
    }
}

impl BodyBudget {
    pub fn new(bytes: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(bytes)),
            metrics,
        }
    }

    /// `bytes` more of the budget, now or never (a body that waited would hold its connection
    /// while stalled bodies drain).
    fn try_reserve(&self, reserved: &mut Reserved, bytes: usize) -> bool {
        let Ok(n) = u32::try_from(bytes) else {
            return false;
        };
        if n == 0 {
            return true;
        }
        match self.permits.clone().try_acquire_many_owned(n) {
            Ok(p) => {
                match &mut reserved._permit {
                    Some(held) => held.merge(p),
                    None => reserved._permit = Some(p),
                }
                reserved.bytes += bytes;
                self.metrics
                    .request_body_bytes_buffered
                    .inc_by(bytes as i64);
                true
            }
            Err(_) => false,
        }
    }

    fn empty(&self) -> Reserved {
        Reserved {
            _permit: None,
            bytes: 0,
            metrics: self.metrics.clone(),
        }
    }
}

/// Why a body was not read whole.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyRefused {
    TooLarge,
    OverBudget,
    TimedOut,
    Failed(String),
}

/// Reads a request's whole body within `limits.body_read_timeout`, holding its bytes in the
/// budget until the returned [`Reserved`] is dropped (after the answer).
pub async fn read_body(
    req: Request<Incoming>,
    limits: &Limits,
    budget: &BodyBudget,
) -> Result<(Request<Body>, Reserved), (BodyRefused, Version)> {
    let version = req.version();
    let (parts, mut body) = req.into_parts();
    let declared = hyper::body::Body::size_hint(&body).exact();
    let mut reserved = budget.empty();
    if declared == Some(0) {
        return Ok((Request::from_parts(parts, Body::empty()), reserved));
    }
    if let Some(n) = declared {
        if n > MAX_BODY_BYTES as u64 {
            return Err((BodyRefused::TooLarge, version));
        }
        if !budget.try_reserve(&mut reserved, n as usize) {
            return Err((BodyRefused::OverBudget, version));
        }
    }
    let read = async {
        let mut buf = BodyBuffer::for_length(declared)?;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyRefused::Failed(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = buf.len() + data.len();
            if len > MAX_BODY_BYTES {
                return Err(BodyRefused::TooLarge);
            }
            // A body without a declared length reserves as it grows.
            let more = len.saturating_sub(reserved.bytes);
            if more > 0 && !budget.try_reserve(&mut reserved, more) {
                return Err(BodyRefused::OverBudget);
            }
            buf.extend(&data);
        }
        Ok::<Bytes, BodyRefused>(buf.freeze())
    };
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Ok(Ok(bytes)) => Ok((Request::from_parts(parts, Body::from(bytes)), reserved)),
        Ok(Err(e)) => Err((e, version)),
        Err(_) => Err((BodyRefused::TimedOut, version)),
    }
}

/// From this declared length a body is read into an anonymous memory map of its own instead of
/// the allocator's heap: unmapped when the review is answered, its pages go back to the system
/// at once, so a burst of large or stalled bodies does not leave kerf's RSS at the burst's peak
/// (the allocator keeps freed pages for reuse).
const MAPPED_BODY_BYTES: usize = 256 * 1024;

/// Where a body's bytes are held while it is read.
enum BodyBuffer {
    Heap(BytesMut),
    /// A declared length of [`MAPPED_BODY_BYTES`] or more: the map is that length, `len` of it
    /// read so far.
    Mapped {
        map: memmap2::MmapMut,
        len: usize,
    },
}

impl BodyBuffer {
    fn for_length(declared: Option<u64>) -> Result<Self, BodyRefused> {
        let n = declared.map_or(0, |n| n as usize);
        if n < MAPPED_BODY_BYTES {
            return Ok(Self::Heap(BytesMut::with_capacity(n)));
        }
        let map = memmap2::MmapMut::map_anon(n)
            .map_err(|e| BodyRefused::Failed(format!("cannot map {n} bytes: {e}")))?;
        Ok(Self::Mapped { map, len: 0 })
    }

    fn len(&self) -> usize {
        match self {
            Self::Heap(b) => b.len(),
            Self::Mapped { len, .. } => *len,
        }
    }

    fn extend(&mut self, data: &[u8]) {
        match self {
            Self::Heap(b) => b.extend_from_slice(data),
            Self::Mapped { map, len } => {
                // hyper ends a body at its Content-Length: no more than the map can arrive.
                let end = (*len + data.len()).min(map.len());
                map[*len..end].copy_from_slice(&data[..end - *len]);
                *len = end;
            }
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            Self::Heap(b) => b.freeze(),
            Self::Mapped { map, len } => Bytes::from_owner(map).slice(..len),
        }
    }
}

/// The answer to a body that was not read whole; HTTP/1 closes the connection after it (the
/// rest of the body is not read).
pub fn refusal(why: &BodyRefused, version: Version, limits: &Limits) -> Response<Body> {
    let (status, text) = match why {
        BodyRefused::TooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {MAX_BODY_BYTES} bytes\n"),
        ),
        BodyRefused::OverBudget => (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many request bodies held at once (--max-buffered-body-bytes): retry\n".to_string(),
        ),
        BodyRefused::TimedOut => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "request body not received within {}s (--body-read-timeout-seconds)\n",
                limits.body_read_timeout.as_secs()
            ),
        ),
        BodyRefused::Failed(e) => (
            StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {e}\n"),
        ),
    };
    let mut resp = Response::new(Body::from(text));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if *why == BodyRefused::OverBudget {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if version < Version::HTTP_2 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

impl BodyRefused {
    /// The `reason` label it is counted under.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            BodyRefused::TooLarge => Some("too_large"),
            BodyRefused::OverBudget => Some("memory_limit"),
            BodyRefused::TimedOut => Some("timeout"),
            BodyRefused::Failed(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            first_request_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(3),
            idle_timeout: Duration::from_secs(7),
            ..Limits::default()
        }
    }

    #[test]
    fn the_deadline_follows_the_phase_of_the_connection() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let l = limits();
        assert_eq!(
            a.deadline(&l),
            Some(Deadline {
                at: t0 + Duration::from_secs(5),
                phase: Phase::FirstRequest
            })
        );
        let mut p = Preface::default();
        a.bytes_read(b"POST /mutate HTTP/1.1\r\n", &mut p);
        let d = a.deadline(&l).unwrap();
        assert_eq!(
            d.phase,
            Phase::Headers,
            "a head arriving: the header deadline is nearer"
        );
        assert!(d.at <= Instant::now() + Duration::from_secs(3));
        let req = a.request();
        assert_eq!(
            a.deadline(&l),
            None,
            "a request in flight has its body deadline"
        );
        a.bytes_read(b"{\"body\": 1}", &mut p);
        assert_eq!(a.deadline(&l), None, "body bytes are not a new head");
        drop(req);
        let d = a.deadline(&l).unwrap();
        assert_eq!(d.phase, Phase::Idle);
        assert!(d.at > Instant::now() + Duration::from_secs(6));
        a.bytes_read(b"GET /", &mut p);
        assert_eq!(a.deadline(&l).unwrap().phase, Phase::Headers);
    }

    #[test]
    fn http2_frames_between_requests_keep_the_idle_deadline() {
        let t0 = Instant::now();
        let a = Activity::new(t0);
        let mut p = Preface::default();
        // The preface split over two reads.
        a.bytes_read(&H2_PREFACE[..5], &mut p);
        a.bytes_read(&H2_PREFACE[5..], &mut p);
        assert_eq!(a.deadline(&limits()).unwrap().phase, Phase::FirstRequest);
        drop(a.request());
        a.bytes_read(b"\0\0\x08\x06\0\0\0\0\0pingping", &mut p);
        assert_eq!(a.deadline(&limits()).unwrap().phase, Phase::Idle);
    }

    #[test]
    fn a_head_that_only_starts_like_the_preface_is_http1() {
        let mut p = Preface::default();
        assert!(!p.check(b"PRI"));
        assert!(!p.check(b" * HTTP/1.1\r\n"));
        assert!(!p.check(H2_PREFACE), "decided once");
    }

    #[test]
    fn the_budget_is_reserved_up_front_and_returned_on_drop() {
        let m = Metrics::new();
        let b = BodyBudget::new(10, m.clone());
        let mut r1 = b.empty();
        assert!(b.try_reserve(&mut r1, 6));
        let mut r2 = b.empty();
        assert!(
            !b.try_reserve(&mut r2, 5),
            "6 + 5 > 10: refused, not waited for"
        );
        assert!(b.try_reserve(&mut r2, 4));
        assert_eq!(m.request_body_bytes_buffered.get(), 10);
        drop(r1);
        assert_eq!(m.request_body_bytes_buffered.get(), 4);
        assert!(b.try_reserve(&mut r2, 6), "a reservation grows");
        drop(r2);
        assert_eq!(m.request_body_bytes_buffered.get(), 0);
        assert_eq!(b.permits.available_permits(), 10);
    }

    #[test]
    fn limits_that_cannot_work_name_their_flag() {
        let bad = |f: fn(&mut Limits)| {
            let mut l = Limits::default();
            f(&mut l);
            l.validate().unwrap_err().to_string()
        };
        assert!(bad(|l| l.idle_timeout = Duration::ZERO).contains("--idle-timeout-seconds"));
        assert!(
            bad(|l| l.max_header_bytes = 4096).contains("--max-header-bytes must be at least 8192")
        );
        assert!(bad(|l| l.max_connections = 0).contains("--max-connections"));
        assert!(bad(|l| l.max_buffered_body_bytes = 1024).contains("--max-buffered-body-bytes"));
        Limits::default().validate().unwrap();
    }
}
