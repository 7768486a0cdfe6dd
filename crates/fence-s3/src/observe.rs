//! The HTTP layer under object_store: fence's own reqwest clients (redirects off), and a
//! record of every HTTP exchange of the request being observed — the status and S3 error code
//! of the answer, or the transport failure: the facts object_store's own error does not
//! expose, and the ones a conditional write's classification needs.
//!
//! Error bodies are cut down to their `<Code>` and `<Message>` before object_store sees them:
//! an AWS `SignatureDoesNotMatch` body echoes the canonical request (with an
//! `x-amz-security-token` value), the string to sign and the signature, and object_store puts
//! whole bodies into its error text.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fence_wire::client::{redirect_free_client, transport_kind, Timeouts};
use fence_wire::error_body::{error_code, sanitized, xml_element};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::ClientOptions;

/// What one HTTP attempt of a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// The store answered with this status and, for error answers, this S3 error `<Code>`.
    Answer { status: u16, code: Option<String> },
    /// No (complete) answer: the transport failed. A failed connect (refused, unreachable, or
    /// timed out while connecting) is `Connect`, whatever else is true of it.
    Transport(HttpErrorKind),
}

tokio::task_local! {
    /// The exchange of the store operation being polled in this task.
    static CURRENT: Exchange;
}

/// A per-operation record of its HTTP attempts. No attempt recorded means the request never
/// reached the network.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exchange(Arc<Mutex<Vec<Observed>>>);

impl Exchange {
    /// Runs `operation` (an object_store call) with its HTTP attempts recorded here. Every
    /// attempt object_store makes for it runs inside this future, so a task-local reaches the
    /// HTTP layer without object_store's cooperation.
    pub(crate) async fn observe<F: Future>(&self, operation: F) -> F::Output {
        CURRENT.scope(self.clone(), operation).await
    }

    fn current() -> Option<Exchange> {
        CURRENT.try_with(Exchange::clone).ok()
    }

    fn record(&self, observed: Observed) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(observed);
    }

    /// The last attempt, if any request reached the network.
    pub(crate) fn last(&self) -> Option<Observed> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last()
            .cloned()
    }
}

/// Makes each object_store client's HTTP client: fence's own reqwest client with redirects
/// off and these timeouts, wrapped to observe every exchange. Every connect makes a new
/// client, so each store client has its own connection pool.
///
/// Written here because object_store's `ClientOptions` cannot turn redirects off, and reqwest
/// follows up to ten by default: a 303 answering a conditional PUT was followed as a GET, and
/// that GET's 200 was taken for the PUT's success.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObservingConnector {
    /// Whole request, connect to last body byte.
    pub request: Duration,
    /// TCP + TLS connect.
    pub connect: Duration,
}

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let timeouts = Timeouts {
            request: self.request,
            connect: self.connect,
        };
        let agent = concat!("fence-s3/", env!("CARGO_PKG_VERSION"));
        let client = redirect_free_client(options, timeouts, agent).map_err(|e| {
            object_store::Error::Generic {
                store: "S3",
                source: Box::new(e.without_url()),
            }
        })?;
        Ok(HttpClient::new(ObservingService {
            inner: HttpClient::new(client),
        }))
    }
}

#[derive(Debug)]
struct ObservingService {
    inner: HttpClient,
}

#[async_trait]
impl HttpService for ObservingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let exchange = Exchange::current();
        let record = |observed| {
            if let Some(x) = &exchange {
                x.record(observed);
            }
        };
        match self.inner.execute(request).await {
            Err(e) => {
                record(Observed::Transport(transport_kind(&e)));
                Err(e)
            }
            Ok(response) if response.status().is_success() => {
                let status = response.status().as_u16();
                record(Observed::Answer { status, code: None });
                Ok(response)
            }
            Ok(response) => {
                let (observed, answer) = sanitize_error_answer(response).await;
                record(observed);
                Ok(answer)
            }
        }
    }
}

/// Reads an error answer's (small) body for its S3 `<Code>` and `<Message>`, and hands on an
/// answer whose body carries only those two. A body that cannot be read is handed on empty:
/// the status alone is the answer.
async fn sanitize_error_answer(response: HttpResponse) -> (Observed, HttpResponse) {
    let status = response.status().as_u16();
    let (mut parts, body) = response.into_parts();
    parts.headers.remove("content-length");
    let bytes = body.bytes().await.unwrap_or_default();
    let code = error_code(&bytes);
    let message = xml_element(&bytes, "Message");
    let clean = sanitized(code.as_deref(), message.as_deref());
    let observed = Observed::Answer { status, code };
    (observed, HttpResponse::from_parts(parts, clean.into()))
}
