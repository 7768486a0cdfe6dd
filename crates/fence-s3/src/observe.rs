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
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::{ClientConfigKey, ClientOptions};

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
        let client = self
            .reqwest_client(options)
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?;
        Ok(HttpClient::new(ObservingService {
            inner: HttpClient::new(client),
        }))
    }
}

impl ObservingConnector {
    /// The options object_store's builder collected (from the environment too) that matter
    /// here; the timeouts are this connector's own.
    fn reqwest_client(&self, options: &ClientOptions) -> reqwest::Result<reqwest::Client> {
        let value = |k: ClientConfigKey| options.get_config_value(&k);
        let flag = |k: ClientConfigKey| value(k).is_some_and(|v| truthy(&v));
        let agent = value(ClientConfigKey::UserAgent)
            .unwrap_or_else(|| concat!("fence-s3/", env!("CARGO_PKG_VERSION")).into());
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.request)
            .connect_timeout(self.connect.min(self.request))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(agent)
            .https_only(!flag(ClientConfigKey::AllowHttp));
        if let Some(url) = value(ClientConfigKey::ProxyUrl) {
            let mut proxy = reqwest::Proxy::all(url)?;
            if let Some(excludes) = value(ClientConfigKey::ProxyExcludes) {
                proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
            }
            builder = builder.proxy(proxy);
        }
        if flag(ClientConfigKey::AllowInvalidCertificates) {
            builder = builder.danger_accept_invalid_certs(true);
        }
        if flag(ClientConfigKey::Http1Only) {
            builder = builder.http1_only();
        }
        if flag(ClientConfigKey::Http2Only) {
            builder = builder.http2_prior_knowledge();
        }
        builder.build()
    }
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes" | "on"
    )
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
        match self.inner.execute(request).await.map_err(connect_first) {
            Err(e) => {
                record(Observed::Transport(e.kind()));
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

/// object_store checks "timed out" before "failed to connect", so a connect timeout came out
/// as a timeout: ambiguous, although no byte of the request was sent. reqwest knows better.
fn connect_first(e: HttpError) -> HttpError {
    let is_connect = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<reqwest::Error>())
        .is_some_and(reqwest::Error::is_connect);
    if is_connect && e.kind() != HttpErrorKind::Connect {
        HttpError::new(HttpErrorKind::Connect, e)
    } else {
        e
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
    let code = s3_error_code(&bytes);
    let message = xml_element(&bytes, "Message");
    let clean = sanitized_body(code.as_deref(), message.as_deref());
    let observed = Observed::Answer { status, code };
    (observed, HttpResponse::from_parts(parts, clean.into()))
}

/// The longest `<Message>` kept, in bytes.
const MAX_MESSAGE: usize = 256;

/// An S3 error body with only the code and the (bounded) message.
fn sanitized_body(code: Option<&str>, message: Option<&str>) -> String {
    let mut out = String::from("<Error>");
    if let Some(code) = code {
        out.push_str(&format!("<Code>{code}</Code>"));
    }
    if let Some(message) = message {
        out.push_str(&format!(
            "<Message>{}</Message>",
            bounded(message, MAX_MESSAGE)
        ));
    }
    out.push_str("</Error>");
    out
}

fn bounded(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The `<Code>` of an S3 XML error body, if there is one and it looks like a code.
pub(crate) fn s3_error_code(body: &[u8]) -> Option<String> {
    let code = xml_element(body, "Code")?;
    code.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        .then_some(code)
}

/// The text of the first `<name>` element of an XML body (no nesting, no markup inside).
fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{name}>"))?;
    let value = text[start..start + len].trim();
    (!value.is_empty() && !value.contains('<')).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_error_code() {
        let body =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>x</Message></Error>";
        assert_eq!(s3_error_code(body).as_deref(), Some("NoSuchBucket"));
        assert_eq!(s3_error_code(b"<Error></Error>"), None);
        assert_eq!(s3_error_code(b"<Code></Code>"), None);
        assert_eq!(s3_error_code(b"<Code>a b</Code>"), None);
        assert_eq!(s3_error_code(&[0xff, 0xfe]), None);
    }

    #[test]
    fn sanitized_bodies_keep_code_and_message_only() {
        let body = b"<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature \
            we calculated does not match</Message><AWSAccessKeyId>AKID</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256 secret-scope</StringToSign>\
            <SignatureProvided>deadbeef</SignatureProvided>\
            <CanonicalRequest>PUT /b/k x-amz-security-token:TOKEN</CanonicalRequest></Error>";
        let clean = sanitized_body(
            s3_error_code(body).as_deref(),
            xml_element(body, "Message").as_deref(),
        );
        assert!(clean.contains("SignatureDoesNotMatch"));
        for secret in ["AKID", "secret-scope", "deadbeef", "TOKEN"] {
            assert!(!clean.contains(secret), "{clean}");
        }
    }

    #[test]
    fn messages_are_bounded_on_a_char_boundary() {
        let long = "ñ".repeat(MAX_MESSAGE);
        let cut = bounded(&long, MAX_MESSAGE);
        assert!(cut.len() <= MAX_MESSAGE && long.starts_with(cut));
    }

    #[test]
    fn truthy_config_values() {
        for yes in ["true", "TRUE", "1", " yes", "on"] {
            assert!(truthy(yes), "{yes}");
        }
        for no in ["false", "0", "", "nope"] {
            assert!(!truthy(no), "{no}");
        }
    }
}
