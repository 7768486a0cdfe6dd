//! The HTTP layer under object_store's Azure client: it records what every attempt of a request
//! came to (the status and the `x-ms-error-code` of the answer, or the transport failure), which
//! object_store's own errors do not expose, and it builds the conditional-write client, which
//! never follows a redirect.

use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::{ClientConfigKey, ClientOptions};

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

    /// The last attempt that failed (a transport failure or a non-2xx answer).
    pub(crate) fn last_failure(&self) -> Option<Observed> {
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

/// Timeouts of the conditional-write client.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CasTimeouts {
    pub request: Duration,
    pub connect: Duration,
}

/// An [`HttpConnector`] whose clients record every attempt: into the request's own
/// [`Exchange`] extension, or into `untagged` for requests without one (listings, whose
/// object_store call takes no extensions, and credential fetches).
///
/// Every connect makes a new reqwest client, so each store client has its own pool.
#[derive(Debug, Clone)]
pub(crate) struct ObservingConnector {
    /// `Some`: the conditional-write client (redirects never followed); `None`: object_store's
    /// own reqwest client, for reads.
    cas: Option<CasTimeouts>,
    untagged: Exchange,
}

impl ObservingConnector {
    /// The connector of the read client.
    pub(crate) fn reads(untagged: Exchange) -> Self {
        ObservingConnector {
            cas: None,
            untagged,
        }
    }

    /// The connector of the conditional-write client.
    pub(crate) fn cas(timeouts: CasTimeouts) -> Self {
        ObservingConnector {
            cas: Some(timeouts),
            untagged: Exchange::default(),
        }
    }
}

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = match self.cas {
            Some(timeouts) => cas_http_client(options, timeouts)?,
            None => ReqwestConnector::default().connect(options)?,
        };
        Ok(HttpClient::new(ObservingService {
            inner,
            untagged: self.untagged.clone(),
        }))
    }
}

/// A reqwest client for conditional requests: it never follows a redirect (a followed 307
/// would send the conditional write again, elsewhere), is bounded by `timeouts`, and honours
/// the transport options of `options` that matter off a laptop (plain HTTP, proxy, invalid
/// certificates, HTTP version). object_store's own client cannot turn redirects off.
pub(crate) fn cas_http_client(
    options: &ClientOptions,
    timeouts: CasTimeouts,
) -> object_store::Result<HttpClient> {
    let flag = |key| options.get_config_value(&key).as_deref() == Some("true");
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("fence-azure/", env!("CARGO_PKG_VERSION")))
        .timeout(timeouts.request)
        .connect_timeout(timeouts.connect.min(timeouts.request))
        .https_only(!flag(ClientConfigKey::AllowHttp))
        .danger_accept_invalid_certs(flag(ClientConfigKey::AllowInvalidCertificates));
    if let Some(url) = options.get_config_value(&ClientConfigKey::ProxyUrl) {
        let mut proxy = reqwest::Proxy::all(&url).map_err(client_error)?;
        if let Some(excludes) = options.get_config_value(&ClientConfigKey::ProxyExcludes) {
            proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
        }
        builder = builder.proxy(proxy);
    }
    if flag(ClientConfigKey::Http1Only) {
        builder = builder.http1_only();
    }
    if flag(ClientConfigKey::Http2Only) {
        builder = builder.http2_prior_knowledge();
    }
    Ok(HttpClient::new(builder.build().map_err(client_error)?))
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

/// object_store calls a connect timeout a timeout; it is a failed connect (nothing was sent),
/// which reqwest still tells apart.
pub(crate) fn transport_kind(e: &HttpError) -> HttpErrorKind {
    let connect = e
        .source()
        .and_then(|s| s.downcast_ref::<reqwest::Error>())
        .is_some_and(reqwest::Error::is_connect);
    if connect {
        HttpErrorKind::Connect
    } else {
        e.kind()
    }
}

/// Records an error answer's code (the `x-ms-error-code` header, else the XML body's
/// `<Code>`), then hands the answer on unchanged.
async fn observe_error_answer(
    exchange: &Exchange,
    response: HttpResponse,
) -> Result<HttpResponse, HttpError> {
    let status = response.status().as_u16();
    if let Some(code) = header_code(response.headers()) {
        exchange.record(Observed::Answer {
            status,
            code: Some(code),
        });
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    match body.bytes().await {
        Ok(bytes) => {
            let code = body_code(&bytes);
            exchange.record(Observed::Answer { status, code });
            Ok(HttpResponse::from_parts(parts, bytes.into()))
        }
        Err(e) => {
            exchange.record(Observed::Answer { status, code: None });
            Err(e)
        }
    }
}

/// The `x-ms-error-code` header, if present and readable.
pub(crate) fn header_code(headers: &http::HeaderMap) -> Option<String> {
    let code = headers.get("x-ms-error-code")?.to_str().ok()?.trim();
    (!code.is_empty()).then(|| code.to_string())
}

/// The `<Code>` of an Azure XML error body, if there is one.
pub(crate) fn body_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    let code = text[start..start + len].trim();
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
            body_code(body.as_bytes()).as_deref(),
            Some("BlobAlreadyExists")
        );
        assert_eq!(body_code(b"<Error></Error>"), None);
        assert_eq!(body_code(b"<Code> </Code>"), None);
        assert_eq!(body_code(&[0xff, 0xfe]), None);
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
            None,
            "only the last {KEPT} are kept"
        );
        exchange.clear();
        assert_eq!(exchange.last(), None);
    }
}
