//! [`FaultProxy`]: an HTTP/1.1 proxy on 127.0.0.1 between an adapter and its server.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, LOCATION};
use hyper::http::request::Parts;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::ledger::{InFlight, Ledger, Upstream};
use super::schedule::{Schedule, WireFault};

/// How the proxy ends a client's connection.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// TCP RST.
    Reset,
    /// TCP FIN, no answer.
    Close,
}

/// Requests and faults so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Requests received from the client.
    pub requests: u64,
    /// Requests that got a fault other than [`WireFault::Forward`].
    pub faults: u64,
    /// Faults injected, by kind.
    pub by_fault: BTreeMap<String, u64>,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    schedule: Schedule,
    ledger: Arc<Ledger>,
    requests: AtomicU64,
    by_fault: Mutex<BTreeMap<String, u64>>,
}

/// An HTTP/1.1 proxy on 127.0.0.1 that forwards each request to one server, or injects the
/// fault its seeded [`Schedule`] picks: resets and lost answers before or after the server
/// answered, canned 503/429/409/500 answers, requests and answers held past a deadline.
///
/// Every write whose body carries a [`TOKEN_MARKER`](super::TOKEN_MARKER) token is recorded
/// in the proxy's [`Ledger`] with what the server answered, so what the adapter *said* can be
/// checked against what the server *did*. Forwarding runs on its own task: a write goes on
/// to the server (and is recorded) even after the client gave up.
///
/// Point the adapter at [`FaultProxy::endpoint`]. Requests keep their `Host` header, so signed
/// requests (SigV4) still verify at the server.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use std::time::Duration;
/// use fence_testkit::wire::{FaultMix, FaultProxy, Schedule};
/// let schedule = Schedule::seeded(1).with_writes(FaultMix::writes(Duration::from_secs(1)));
/// let proxy = FaultProxy::start("127.0.0.1:9000".parse().unwrap(), schedule).await?;
/// println!("adapter endpoint: {}", proxy.endpoint());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr, schedule: Schedule) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            schedule,
            ledger: Ledger::new(),
            requests: AtomicU64::new(0),
            by_fault: Mutex::new(BTreeMap::new()),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(FaultProxy {
            addr,
            shared,
            accept,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`: the endpoint to give the adapter.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The schedule, to change the mixes or script faults while the proxy runs.
    pub fn schedule(&self) -> &Schedule {
        &self.shared.schedule
    }

    /// What the server did with each marked write.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.shared.ledger
    }

    /// Requests and faults so far.
    pub fn stats(&self) -> WireStats {
        let by_fault = self
            .shared
            .by_fault
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        WireStats {
            requests: self.shared.requests.load(Ordering::SeqCst),
            faults: by_fault.values().sum(),
            by_fault,
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(connection(stream, shared.clone()));
    }
}

/// Serves one client connection until it ends or a fault kills it.
async fn connection(stream: TcpStream, shared: Arc<Shared>) {
    // A second handle on the socket, to reset or close it while hyper owns the stream.
    let Ok((stream, twin)) = twin(stream) else {
        return;
    };
    let (kill, mut killed) = mpsc::unbounded_channel();
    let service = service_fn(move |req| {
        let (shared, kill) = (shared.clone(), kill.clone());
        async move { Ok::<_, Infallible>(serve(req, &shared, &kill).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = conn => {}
        Some(how) = killed.recv() => {
            let sock = socket2::SockRef::from(&twin);
            let _ = match how {
                Kill::Reset => sock.set_linger(Some(Duration::ZERO)),
                Kill::Close => sock.shutdown(std::net::Shutdown::Both),
            };
        }
    }
}

fn twin(stream: TcpStream) -> std::io::Result<(TcpStream, std::net::TcpStream)> {
    let std = stream.into_std()?;
    let twin = std.try_clone()?;
    Ok((TcpStream::from_std(std)?, twin))
}

fn is_write(method: &Method) -> bool {
    [Method::PUT, Method::POST, Method::PATCH, Method::DELETE].contains(method)
}

type Answer = Response<Full<Bytes>>;

/// One request: pick its fault, forward or not, answer or kill.
async fn serve(
    req: Request<Incoming>,
    shared: &Shared,
    kill: &mpsc::UnboundedSender<Kill>,
) -> Answer {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return killed(kill, Kill::Reset).await;
    };
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let fault = shared.schedule.next(is_write(&parts.method));
    if fault != WireFault::Forward {
        let mut by_fault = shared.by_fault.lock().unwrap_or_else(|p| p.into_inner());
        *by_fault.entry(fault_kind(&fault)).or_default() += 1;
    }
    let request = format!("{} {}", parts.method, parts.uri);
    let request_uri = parts.uri.to_string();
    let in_flight =
        is_write(&parts.method).then(|| shared.ledger.begin(&body, &request, &fault.to_string()));
    if !fault.forwards() {
        if let Some(sent) = in_flight {
            sent.finish(Upstream::NotSent);
        }
        return match fault {
            WireFault::AnswerBefore(status) => canned(status),
            WireFault::RedirectBefore => redirect(&request_uri),
            _ => killed(kill, Kill::Reset).await,
        };
    }
    let hold = match fault {
        WireFault::DelayForward(d) => d,
        _ => Duration::ZERO,
    };
    let forwarded = tokio::spawn(forward(shared.upstream, parts, body, hold, in_flight));
    let answer = match forwarded.await {
        Ok(Ok(answer)) => answer,
        _ => return killed(kill, Kill::Reset).await,
    };
    match fault {
        WireFault::DropAnswer => killed(kill, Kill::Close).await,
        WireFault::ResetAfterForward => killed(kill, Kill::Reset).await,
        WireFault::AnswerAfter(status) => canned(status),
        WireFault::DelayAnswer(d) => {
            tokio::time::sleep(d).await;
            answer
        }
        _ => answer,
    }
}

/// The fault's kind without its parameter, for [`WireStats::by_fault`].
fn fault_kind(fault: &WireFault) -> String {
    match fault {
        WireFault::DelayForward(_) => "request held".into(),
        WireFault::DelayAnswer(_) => "answer held".into(),
        other => other.to_string(),
    }
}

/// Asks the connection to die, and waits for it.
async fn killed(kill: &mpsc::UnboundedSender<Kill>, how: Kill) -> Answer {
    let _ = kill.send(how);
    std::future::pending().await
}

/// The proxy's own answer: `status` with an S3-style error body.
fn canned(status: u16) -> Answer {
    let code = match status {
        409 => "ConditionalRequestConflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "SlowDown",
        303 => "SeeOther",
        _ => "InjectedFault",
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
         <Message>injected by the fence-testkit fault proxy</Message></Error>"
    );
    let mut answer = Response::new(Full::new(Bytes::from(body)));
    *answer.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    answer
}

/// `303 See Other` back to `uri`.
fn redirect(uri: &str) -> Answer {
    let mut answer = canned(303);
    if let Ok(location) = HeaderValue::from_str(uri) {
        answer.headers_mut().insert(LOCATION, location);
    }
    answer
}

/// Sends the request to the server (after `hold`) and records what it answered.
async fn forward(
    upstream: SocketAddr,
    parts: Parts,
    body: Bytes,
    hold: Duration,
    in_flight: Option<InFlight>,
) -> Result<Answer, ()> {
    tokio::time::sleep(hold).await;
    let sent = exchange(upstream, parts, body).await;
    let record = match &sent {
        Ok(answer) => Upstream::Answered(answer.status().as_u16()),
        Err(Exchange::Refused) => Upstream::NotSent,
        Err(Exchange::Lost(why)) => Upstream::Lost(why.clone()),
    };
    if let Some(in_flight) = in_flight {
        in_flight.finish(record);
    }
    sent.map_err(|_| ())
}

enum Exchange {
    /// The server refused the connection: nothing was sent.
    Refused,
    /// Sent, but no whole answer came back.
    Lost(String),
}

/// One request on a fresh connection to the server; the whole answer, or why not.
async fn exchange(upstream: SocketAddr, parts: Parts, body: Bytes) -> Result<Answer, Exchange> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(|_| Exchange::Refused)?;
    let lost = |e: hyper::Error| Exchange::Lost(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(lost)?;
    tokio::spawn(conn);
    let mut req = Request::from_parts(parts, Full::new(body));
    strip_hop_by_hop(req.headers_mut());
    let answer = sender.send_request(req).await.map_err(lost)?;
    let (mut parts, body) = answer.into_parts();
    let body = body.collect().await.map_err(lost)?.to_bytes();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1). The proxy
/// forwards whole bodies, so chunked framing goes and `Content-Length` (when sent) stays true.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    ];
    for name in HOP {
        headers.remove(HeaderName::from_static(name));
    }
}
