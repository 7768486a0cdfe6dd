//! The HTTP layer under object_store's Azure client: it records what every attempt of a request
//! came to (the status and the `x-ms-error-code` of the answer, or the transport failure), which
//! object_store's own errors do not expose, and it builds the conditional-write client, which
//! never follows a redirect.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
pub(crate) use fence_wire::client::transport_kind;
use fence_wire::client::{redirect_free_client, Timeouts};
use fence_wire::error_body::{error_code, sanitized, xml_element};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::ClientOptions;

/// What one HTTP attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// The store answered with this status and, for error answers, this Azure error code.
    Answer { status: u16, code: Option<String> },
    /// No (complete) answer: the transport failed.
    Transport(HttpErrorKind),
}

/// The attempts of a request (the last few), shared between the caller and the HTTP layer.
/// No attempt recorded means nothing reached the network.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exchange(Arc<Mutex<Vec<Observed>>>);

/// Attempts an [`Exchange`] keeps; older ones are dropped (only the last ones classify).
const KEPT: usize = 8;

impl Exchange {
    fn attempts(&self) -> std::sync::MutexGuard<'_, Vec<Observed>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, observed: Observed) {
        let mut attempts = self.attempts();
        if attempts.len() >= KEPT {
            attempts.remove(0);
        }
        attempts.push(observed);
    }

    /// The last attempt, if any request reached the network.
    pub(crate) fn last(&self) -> Option<Observed> {
        self.attempts().last().cloned()
    }

    /// The last attempt that failed (a transport failure or a non-2xx answer), else the last
    /// attempt: a 2xx answer object_store could not use.
    pub(crate) fn last_failure(&self) -> Option<Observed> {
        self.last_failed().or_else(|| self.last())
    }

    fn last_failed(&self) -> Option<Observed> {
        let attempts = self.attempts();
        let failed = |o: &&Observed| {
            !matches!(
                o,
                Observed::Answer {
                    status: 200..=299,
                    ..
                }
            )
        };
        attempts.iter().rev().find(failed).cloned()
    }

    /// Forgets every attempt.
    pub(crate) fn clear(&self) {
        self.attempts().clear();
    }

    /// Request extensions carrying this exchange.
    pub(crate) fn extensions(&self) -> object_store::Extensions {
        let mut extensions = object_store::Extensions::new();
        extensions.insert(self.clone());
        extensions
    }
}

/// An [`HttpConnector`] whose clients record every attempt: into the request's own
/// [`Exchange`] extension, or into `untagged` for requests without one (listings, whose
/// object_store call takes no extensions, and credential fetches).
///
/// Every connect makes a new reqwest client (redirects never followed, bounded by
/// `timeouts`), so each store client has its own pool.
#[derive(Debug, Clone)]
pub(crate) struct ObservingConnector {
    timeouts: Timeouts,
    untagged: Exchange,
}

impl ObservingConnector {
    /// The connector of the read client.
    pub(crate) fn reads(timeouts: Timeouts, untagged: Exchange) -> Self {
        ObservingConnector { timeouts, untagged }
    }

    /// The connector of the conditional-write client.
    pub(crate) fn cas(timeouts: Timeouts) -> Self {
        ObservingConnector {
            timeouts,
            untagged: Exchange::default(),
        }
    }
}

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = fence_http_client(options, self.timeouts)?;
        Ok(HttpClient::new(ObservingService {
            inner,
            untagged: self.untagged.clone(),
        }))
    }
}

/// A reqwest client of this store, which never follows a redirect (see
/// [`fence_wire::client`]).
pub(crate) fn fence_http_client(
    options: &ClientOptions,
    timeouts: Timeouts,
) -> object_store::Result<HttpClient> {
    let agent = concat!("fence-azure/", env!("CARGO_PKG_VERSION"));
    let client = redirect_free_client(options, timeouts, agent).map_err(client_error)?;
    Ok(HttpClient::new(client))
}

fn client_error(e: reqwest::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "fence-azure",
        source: Box::new(e.without_url()),
    }
}

#[derive(Debug)]
struct ObservingService {
    inner: HttpClient,
    untagged: Exchange,
}

#[async_trait]
impl HttpService for ObservingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let exchange = match request.extensions().get::<Exchange>() {
            Some(exchange) => exchange.clone(),
            None => self.untagged.clone(),
        };
        match self.inner.execute(request).await {
            Err(e) => {
                exchange.record(Observed::Transport(transport_kind(&e)));
                Err(e)
            }
            Ok(response) if response.status().is_success() => {
                let status = response.status().as_u16();
                exchange.record(Observed::Answer { status, code: None });
                Ok(response)
            }
            Ok(response) => observe_error_answer(&exchange, response).await,
        }
    }
}

/// Records an error answer's code (the `x-ms-error-code` header, else the XML body's
/// `<Code>`), then hands on the answer with a body of only that code and the (bounded)
/// `<Message>`: an `AuthenticationFailed` body echoes the request's signature and the string
/// the server signed, and object_store puts whole error bodies into its error text.
async fn observe_error_answer(
    exchange: &Exchange,
    response: HttpResponse,
) -> Result<HttpResponse, HttpError> {
    let status = response.status().as_u16();
    let header = header_code(response.headers());
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    match body.bytes().await {
        Ok(bytes) => {
            let code = header.or_else(|| error_code(&bytes));
            let message = xml_element(&bytes, "Message");
            let clean = sanitized(code.as_deref(), message.as_deref());
            exchange.record(Observed::Answer { status, code });
            Ok(HttpResponse::from_parts(parts, clean.into()))
        }
        Err(e) => {
            exchange.record(Observed::Answer {
                status,
                code: header,
            });
            Err(e)
        }
    }
}

/// The `x-ms-error-code` header, if present and readable.
pub(crate) fn header_code(headers: &http::HeaderMap) -> Option<String> {
    let code = headers.get("x-ms-error-code")?.to_str().ok()?.trim();
    (!code.is_empty()).then(|| code.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_error_code() {
        let body = "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>BlobAlreadyExists</Code>\
                    <Message>The specified blob already exists.</Message></Error>";
        assert_eq!(
            error_code(body.as_bytes()).as_deref(),
            Some("BlobAlreadyExists")
        );
        let mut headers = http::HeaderMap::new();
        assert_eq!(header_code(&headers), None);
        headers.insert("x-ms-error-code", "ConditionNotMet".parse().unwrap());
        assert_eq!(header_code(&headers).as_deref(), Some("ConditionNotMet"));
    }

    #[test]
    fn an_exchange_keeps_the_last_attempts_and_finds_the_last_failure() {
        let exchange = Exchange::default();
        assert_eq!(exchange.last(), None);
        let ok = Observed::Answer {
            status: 200,
            code: None,
        };
        let denied = Observed::Answer {
            status: 403,
            code: Some("AuthenticationFailed".into()),
        };
        exchange.record(denied.clone());
        for _ in 0..KEPT - 1 {
            exchange.record(ok.clone());
        }
        assert_eq!(exchange.last(), Some(ok.clone()));
        assert_eq!(exchange.last_failure(), Some(denied));
        exchange.record(ok);
        assert_eq!(
            exchange.last_failure(),
            exchange.last(),
            "only the last {KEPT} are kept: the last answer stands"
        );
        exchange.clear();
        assert_eq!(exchange.last(), None);
    }
}
