//! A canned HTTP/1.1 server on 127.0.0.1 for wire-fault tests of the adapters: each request
//! is answered as the test's handler says — a fixed answer, a body cut short, a delay, or the
//! request forwarded to a real server (whose answer is passed on or replaced). Every answer
//! closes its connection, so no client reuses one the server has dropped.
//!
//! Shared by the tests of every HTTP adapter (`#[path]`-included); small on purpose: it
//! reads a request's headers and a `Content-Length` body, nothing more. Written on raw TCP
//! rather than hyper's server because the faults are below HTTP's framing: a body cut short
//! of its `Content-Length`, a body of gigabytes streamed from one small buffer, and
//! SigV4-signed requests forwarded byte for byte. Also the helpers the wire tests assert with.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The request's bytes as received, for forwarding.
    raw_head: Vec<u8>,
}

impl Request {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The number right after `before` in the target (`pageToken=t` in `…&pageToken=t7&…`
    /// is 7), if there is one.
    pub fn query_number(&self, before: &str) -> Option<u64> {
        let rest = self.target.split(before).nth(1)?;
        rest.split('&').next()?.parse().ok()
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete answer.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Headers announcing `declared` body bytes, then only `body`, then the connection closes.
    Cut {
        status: u16,
        headers: Vec<(String, String)>,
        declared: usize,
        body: Vec<u8>,
    },
    /// Headers announcing `len` body bytes (unless not `announced`: then the body ends when
    /// the connection closes, as HTTP/1.0 allows), then `start` and `fill` up to `len` bytes,
    /// written from one small buffer (never allocated whole) until done or the client hangs
    /// up. The bytes written count in [`Canned::streamed`].
    Stream {
        status: u16,
        headers: Vec<(String, String)>,
        start: Vec<u8>,
        len: u64,
        fill: u8,
        announced: bool,
    },
    /// This reply, after a delay.
    After(Duration, Box<Reply>),
    /// Forward the request to `upstream` and pass its answer on.
    Forward(SocketAddr),
    /// Forward the request to `upstream`, wait for its whole answer (so the request was
    /// carried out), then answer this instead.
    ForwardThen(SocketAddr, Box<Reply>),
}

impl Reply {
    /// A complete answer with a body and its content type.
    pub fn status(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
        Reply::Answer {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// A streamed answer of `len` bytes of `fill` (see [`Reply::Stream`]).
    pub fn stream(status: u16, content_type: &str, len: u64, fill: u8) -> Reply {
        Reply::Stream {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            start: Vec::new(),
            len,
            fill,
            announced: true,
        }
    }

    /// The same streamed answer without a `Content-Length`: its end is the connection's.
    pub fn unannounced(mut self) -> Reply {
        if let Reply::Stream { announced, .. } = &mut self {
            *announced = false;
        }
        self
    }

    /// The same streamed answer, beginning with `start` (an error's code, a listing's head).
    pub fn with_body_start(mut self, body_start: &str) -> Reply {
        if let Reply::Stream { start, .. } = &mut self {
            *start = body_start.as_bytes().to_vec();
        }
        self
    }

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. }
        | Reply::Cut { headers, .. }
        | Reply::Stream { headers, .. } = &mut self
        {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

pub const GIB: u64 = 1 << 30;

/// What a server may write before a client that stopped reading hangs up, beyond what was
/// read: the sockets' buffers on loopback hold a few MiB each way.
pub const HANG_UP_SLACK: u64 = 32 << 20;

/// `op`, which must end well within a minute on any machine (without the caps of the hostile
/// answer tests, it reads gigabytes first).
pub async fn within_deadline<T>(op: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), op)
        .await
        .expect("the operation outlived its deadline")
}

/// A running canned server.
#[derive(Clone)]
pub struct Canned {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    streamed: Arc<AtomicU64>,
}

impl Canned {
    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// Body bytes written by [`Reply::Stream`] answers so far (what the clients read, plus
    /// what the sockets' buffers took before they hung up).
    pub fn streamed(&self) -> u64 {
        self.streamed.load(Ordering::Relaxed)
    }

    /// How many requests matched `f`.
    pub fn count(&self, f: impl Fn(&Request) -> bool) -> usize {
        self.requests().iter().filter(|r| f(r)).count()
    }
}

/// Starts a server answering every request with `handler`'s reply.
pub async fn serve(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Canned {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let canned = Canned {
        addr: listener.local_addr().unwrap(),
        requests: Arc::default(),
        streamed: Arc::default(),
    };
    let handler: Arc<Handler> = Arc::new(handler);
    let (requests, streamed) = (canned.requests.clone(), canned.streamed.clone());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (handler, requests) = (handler.clone(), requests.clone());
            let streamed = streamed.clone();
            tokio::spawn(async move {
                let mut conn = conn;
                let Some(request) = read_request(&mut conn).await else {
                    return;
                };
                let reply = handler(&request);
                requests.lock().unwrap().push(request.clone());
                answer(conn, &request, reply, &streamed).await;
            });
        }
    });
    canned
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let (head, mut body) = read_head(stream).await?;
    let text = String::from_utf8_lossy(&head).to_string();
    let mut lines = text.split("\r\n");
    let mut start = lines.next()?.split(' ');
    let (method, target) = (start.next()?.to_string(), start.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut buf = vec![0u8; 64 << 10];
    while body.len() < len {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&buf[..n]);
    }
    body.truncate(len);
    Some(Request {
        method,
        target,
        headers,
        body,
        raw_head: head,
    })
}

/// Reads up to the blank line: (the head, the body bytes read past it).
async fn read_head(stream: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let body = got.split_off(end + 4);
            return Some((got, body));
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

async fn answer(mut stream: TcpStream, request: &Request, reply: Reply, streamed: &AtomicU64) {
    let mut reply = reply;
    loop {
        match reply {
            Reply::After(delay, next) => {
                tokio::time::sleep(delay).await;
                reply = *next;
            }
            Reply::Answer {
                status,
                headers,
                body,
            } => {
                let head = head(status, &headers, body.len());
                let _ = stream.write_all(&[head.as_bytes(), &body].concat()).await;
                return;
            }
            Reply::Cut {
                status,
                headers,
                declared,
                body,
            } => {
                let head = head(status, &headers, declared);
                let _ = stream.write_all(&[head.as_bytes(), &body].concat()).await;
                let _ = stream.flush().await;
                return;
            }
            Reply::Stream {
                status,
                headers,
                start,
                len,
                fill,
                announced,
            } => {
                let announced = announced.then(|| usize::try_from(len).unwrap());
                let head = head_announcing(status, &headers, announced);
                let first = [head.as_bytes(), &start].concat();
                if stream.write_all(&first).await.is_ok() {
                    streamed.fetch_add(start.len() as u64, Ordering::Relaxed);
                    let rest = len.saturating_sub(start.len() as u64);
                    write_fill(&mut stream, rest, fill, streamed).await;
                }
                return;
            }
            Reply::Forward(upstream) => {
                let upstream_answer = forward(request, upstream).await;
                let _ = stream.write_all(&upstream_answer).await;
                return;
            }
            Reply::ForwardThen(upstream, next) => {
                forward(request, upstream).await;
                reply = *next;
            }
        }
    }
}

/// Writes `len` bytes of `fill` from one 64 KiB buffer, counting them, until the peer hangs
/// up.
async fn write_fill(stream: &mut TcpStream, len: u64, fill: u8, streamed: &AtomicU64) {
    let buf = vec![fill; 64 << 10];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        if stream.write_all(&buf[..n]).await.is_err() {
            return;
        }
        streamed.fetch_add(n as u64, Ordering::Relaxed);
        left -= n as u64;
    }
}

fn head(status: u16, headers: &[(String, String)], len: usize) -> String {
    head_announcing(status, headers, Some(len))
}

fn head_announcing(status: u16, headers: &[(String, String)], len: Option<usize>) -> String {
    let mut head = format!("HTTP/1.1 {status} Canned\r\nConnection: close\r\n");
    if let Some(len) = len {
        head.push_str(&format!("Content-Length: {len}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Sends `request` to `upstream` (asking it to close after answering) and returns its whole
/// answer.
async fn forward(request: &Request, upstream: SocketAddr) -> Vec<u8> {
    let Ok(mut conn) = TcpStream::connect(upstream).await else {
        return Vec::new();
    };
    let head = String::from_utf8_lossy(&request.raw_head).to_string();
    let mut lines: Vec<&str> = head.trim_end_matches("\r\n").split("\r\n").collect();
    lines.retain(|l| !l.to_ascii_lowercase().starts_with("connection:"));
    lines.push("Connection: close");
    let raw = format!("{}\r\n\r\n", lines.join("\r\n"));
    if conn
        .write_all(&[raw.as_bytes(), &request.body].concat())
        .await
        .is_err()
    {
        return Vec::new();
    }
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    answer
}

/// Asserts `err`'s kind and commit state.
pub fn assert_error(
    err: &fence_core::Error,
    kind: fence_core::ErrorKind,
    commit: fence_core::Commit,
) {
    assert_eq!(kind_commit(err), (kind, commit), "{err:?}");
}

/// Limits of a listing that allow only 20 pages.
pub const TWENTY_PAGES: fence_wire::listing::ListingLimits = fence_wire::listing::ListingLimits {
    pages: 20,
    ..fence_wire::listing::ListingLimits::DEFAULT
};

/// Lists `prefix` through `store`, which must stop on a listing cap within the deadline:
/// `Unsupported`, not committed.
pub async fn assert_listing_capped(
    store: &dyn fence_core::ConditionalStore,
    prefix: Option<&fence_core::Key>,
) {
    let err = within_deadline(store.list(prefix)).await.unwrap_err();
    let (kind, commit) = (
        fence_core::ErrorKind::Unsupported,
        fence_core::Commit::NotCommitted,
    );
    assert_error(&err, kind, commit);
}

/// Lists `cells` through `store` at `server`, whose listing pages (those `is_listing` picks
/// out) carry 1,000 names each and never end: the listing stops on its limit of names (the
/// default 100,000) at the 101st page.
pub async fn assert_names_capped(
    store: &dyn fence_core::ConditionalStore,
    server: &Canned,
    is_listing: fn(&Request) -> bool,
) {
    let cells = fence_core::Key::new("cells").unwrap();
    assert_listing_capped(store, Some(&cells)).await;
    assert_eq!(server.count(is_listing), 101);
}

/// Lists everything through `store` (with [`TWENTY_PAGES`]) at `server`, whose listing pages
/// are empty and never end: the listing stops on its limit of pages.
pub async fn assert_pages_capped(
    store: &dyn fence_core::ConditionalStore,
    server: &Canned,
    is_listing: fn(&Request) -> bool,
) {
    assert_listing_capped(store, None).await;
    assert_eq!(server.count(is_listing), 20);
}

/// Reads a record that `server` answers with gigabytes: the read must end within the deadline
/// as `kind` (`Corrupt`: over the record limit), not committed, naming the key, after one
/// request, having read no further than the limit.
pub async fn assert_long_record_refused(
    store: &dyn fence_core::ConditionalStore,
    server: &Canned,
    kind: fence_core::ErrorKind,
) {
    let key = fence_core::Key::new("cells/c1/own.json").unwrap();
    let err = within_deadline(store.get(&key)).await.unwrap_err();
    assert_error(&err, kind, fence_core::Commit::NotCommitted);
    assert_eq!(err.key(), Some(&key));
    assert!(
        server.streamed() < HANG_UP_SLACK,
        "read {} bytes",
        server.streamed()
    );
    assert_eq!(
        server.requests().len(),
        1,
        "a record too long is not retried"
    );
}

/// `limited` (record limit 1,000, at `server`, which accepts any write and answers every read
/// with 1,001 bytes) refuses to read or write a longer record, and writes one of 1,000;
/// `default` (the same without a limit set) declares the default record limit.
pub async fn assert_record_limit(
    limited: &dyn fence_core::ConditionalStore,
    default: &dyn fence_core::ConditionalStore,
    server: &Canned,
    write: &str,
) {
    use fence_core::{CasGuard, Commit, ErrorKind, PutOutcome};
    assert_eq!(limited.capabilities().max_body, Some(1000));
    let key = fence_core::Key::new("k").unwrap();
    assert_eq!(
        limited.get(&key).await.unwrap_err().kind(),
        ErrorKind::Corrupt
    );
    let long = limited
        .put(&key, vec![0; 1001].into(), CasGuard::Absent)
        .await;
    assert_error(
        &long.unwrap_err(),
        ErrorKind::InvalidInput,
        Commit::NotCommitted,
    );
    let fits = limited
        .put(&key, vec![0; 1000].into(), CasGuard::Absent)
        .await;
    assert!(matches!(fits, Ok(PutOutcome::Applied(_))), "{fits:?}");
    assert_eq!(
        server.count(|r| r.method == write),
        1,
        "the long body was never sent"
    );
    let limit = Some(fence_core::DEFAULT_RECORD_LIMIT);
    assert_eq!(default.capabilities().max_body, limit);
}

/// `server`'s streamed answers were read no further than their start: each could have
/// written no more than the sockets hold.
pub fn assert_read_no_further(server: &Canned) {
    let (sent, answers) = (server.streamed(), server.requests().len() as u64);
    assert!(
        sent < answers.max(1) * HANG_UP_SLACK,
        "{sent} bytes for {answers} answers"
    );
}

/// An error's kind and commit state, the pair wire tests assert.
pub fn kind_commit(e: &fence_core::Error) -> (fence_core::ErrorKind, fence_core::Commit) {
    (e.kind(), e.commit())
}

/// `Display`, `Debug` and every source's `Display` and `Debug`, in one string: what a log
/// line could ever show of `err`.
pub fn error_texts(err: &fence_core::Error) -> String {
    let mut texts = vec![err.to_string(), format!("{err:?}")];
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        texts.push(s.to_string());
        texts.push(format!("{s:?}"));
        source = s.source();
    }
    texts.join(" | ")
}

/// A proxy to `upstream` that carries out every `method` request there, then answers `reply`
/// in its place; other requests pass through.
pub async fn replacing_answers(upstream: SocketAddr, method: &'static str, reply: Reply) -> Canned {
    serve(move |r| match r.method == method {
        true => Reply::ForwardThen(upstream, Box::new(reply.clone())),
        false => Reply::Forward(upstream),
    })
    .await
}

/// Creates `key` through `via` (a proxy whose answer is not the truth): the answer must be an
/// ambiguous `kind`, and `direct` must show that the create landed.
pub async fn assert_create_lands_ambiguously(
    via: &dyn fence_core::ConditionalStore,
    direct: &dyn fence_core::ConditionalStore,
    key: &fence_core::Key,
    kind: fence_core::ErrorKind,
) {
    let body = bytes::Bytes::from("ours");
    let got = via
        .put(key, body.clone(), fence_core::CasGuard::Absent)
        .await;
    let err = got.expect_err("the proxy answered an error");
    assert_eq!(
        kind_commit(&err),
        (kind, fence_core::Commit::Ambiguous),
        "{err:?}"
    );
    let landed = direct.get(key).await.unwrap().expect("the create landed");
    assert_eq!(landed.body, body);
}

/// Lists `cells` through `store`, whose server refused the listing with `status`: an error
/// of `kind`, not committed, naming `cells` — never an empty list.
pub async fn assert_listing_refused(
    store: &dyn fence_core::ConditionalStore,
    status: u16,
    kind: fence_core::ErrorKind,
) {
    let cells = fence_core::Key::new("cells").unwrap();
    let err = within_deadline(store.list(Some(&cells))).await.unwrap_err();
    let not_committed = fence_core::Commit::NotCommitted;
    assert_eq!(kind_commit(&err), (kind, not_committed), "{status}: {err}");
    assert_eq!(err.key(), Some(&cells), "{status}: {err}");
}
