//! A canned HTTP/1.1 server on 127.0.0.1 for wire-fault tests of the adapters: each request
//! is answered as the test's handler says — a fixed answer, a body cut short, a delay, or the
//! request forwarded to a real server (whose answer is passed on or replaced). Every answer
//! closes its connection, so no client reuses one the server has dropped.
//!
//! Shared by the tests of fence-s3 and fence-gcs (`#[path]`-included); small on purpose: it
//! reads a request's headers and a `Content-Length` body, nothing more. Written on raw TCP
//! rather than hyper's server because the faults are below HTTP's framing: a body cut short
//! of its `Content-Length`, and SigV4-signed requests forwarded byte for byte. Also the two helpers
//! both crates' wire tests assert with.
#![allow(dead_code)]

use std::net::SocketAddr;
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

    /// The same answer with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Answer { headers, .. } | Reply::Cut { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running canned server.
#[derive(Clone)]
pub struct Canned {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
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
    };
    let handler: Arc<Handler> = Arc::new(handler);
    let requests = canned.requests.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let (handler, requests) = (handler.clone(), requests.clone());
            tokio::spawn(async move {
                let mut conn = conn;
                let Some(request) = read_request(&mut conn).await else {
                    return;
                };
                let reply = handler(&request);
                requests.lock().unwrap().push(request.clone());
                answer(conn, &request, reply).await;
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

async fn answer(mut stream: TcpStream, request: &Request, reply: Reply) {
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

fn head(status: u16, headers: &[(String, String)], len: usize) -> String {
    let mut head =
        format!("HTTP/1.1 {status} Canned\r\nContent-Length: {len}\r\nConnection: close\r\n");
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
