//! The canned server: requests read, replies written, on raw TCP.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method (`PUT`).
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// The headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (as long as its `Content-Length`).
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
        /// Its status.
        status: u16,
        /// Its headers (`Content-Length` is added).
        headers: Vec<(String, String)>,
        /// Its body.
        body: Vec<u8>,
    },
    /// Headers announcing `declared` body bytes, then only `body`, then the connection closes.
    Cut {
        /// Its status.
        status: u16,
        /// Its headers.
        headers: Vec<(String, String)>,
        /// The `Content-Length` announced.
        declared: usize,
        /// What is sent of the body.
        body: Vec<u8>,
    },
    /// Headers announcing `len` body bytes (unless not `announced`: then the body ends when
    /// the connection closes, as HTTP/1.0 allows), then `start` and `fill` up to `len` bytes,
    /// written from one small buffer (never allocated whole) until done or the client hangs
    /// up. The bytes written count in [`Canned::streamed`].
    Stream {
        /// Its status.
        status: u16,
        /// Its headers.
        headers: Vec<(String, String)>,
        /// The body's first bytes.
        start: Vec<u8>,
        /// The body's length.
        len: u64,
        /// The byte the rest of the body is made of.
        fill: u8,
        /// Whether a `Content-Length` announces `len`.
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

/// A running canned server: the requests it received, and what its streamed answers wrote.
#[derive(Clone, Debug)]
pub struct Canned {
    /// Where it listens.
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
