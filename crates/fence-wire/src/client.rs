//! The reqwest client under every object_store client of the adapters.
//!
//! Written here because object_store's `ClientOptions` cannot turn redirects off, and reqwest
//! follows up to ten by default: a 303 answering a conditional PUT was followed as a GET, and
//! that GET's 200 taken for the PUT's success; a followed 307 sends the conditional write
//! again, elsewhere; a followed 302 answers a read with another object.

use std::time::Duration;

use bytes::Bytes;
use object_store::client::{HttpError, HttpErrorKind, HttpResponse, HttpResponseBody};
use object_store::{ClientConfigKey, ClientOptions};

use crate::body::{read_prefix, AnswerBudget, Budgeted};
use crate::error_body::{error_code, sanitized, xml_element, ERROR_BODY_LIMIT};

/// The most of any answer's body object_store may read whole when the operation set no
/// budget of its own: credentials (instance metadata, tokens) and the answers to writes,
/// whose bodies fence never uses. A few KiB in practice.
pub const CONTROL_ANSWER_LIMIT: u64 = 64 << 10;

/// The timeouts of one client's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Whole request, connect to last body byte.
    pub request: Duration,
    /// TCP + TLS connect (never more than `request`).
    pub connect: Duration,
}

/// A reqwest client that never follows a redirect, bounded by `timeouts`, with the transport
/// options of `options` that matter off a laptop: plain HTTP, proxy (and its exclusions),
/// invalid certificates, HTTP version, user agent (`agent` unless set). Each call makes a
/// new client, so each caller has its own connection pool.
///
/// ```
/// use std::time::Duration;
/// use fence_wire::client::{redirect_free_client, Timeouts};
/// let timeouts = Timeouts { request: Duration::from_secs(3), connect: Duration::from_secs(1) };
/// let options = object_store::ClientOptions::new().with_allow_http(true);
/// assert!(redirect_free_client(&options, timeouts, "fence-doc/1").is_ok());
/// ```
pub fn redirect_free_client(
    options: &ClientOptions,
    timeouts: Timeouts,
    agent: &str,
) -> reqwest::Result<reqwest::Client> {
    let value = |k: ClientConfigKey| options.get_config_value(&k);
    let flag = |k: ClientConfigKey| value(k).is_some_and(|v| truthy(&v));
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeouts.request)
        .connect_timeout(timeouts.connect.min(timeouts.request))
        .pool_idle_timeout(Duration::from_secs(60))
        .user_agent(value(ClientConfigKey::UserAgent).unwrap_or_else(|| agent.to_string()))
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

/// What a transport failure was. object_store checks "timed out" before "failed to connect",
/// so a connect timeout came out as a timeout (ambiguous), although no byte of the request
/// was sent; reqwest still tells it apart.
pub fn transport_kind(e: &HttpError) -> HttpErrorKind {
    let connect = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<reqwest::Error>())
        .is_some_and(reqwest::Error::is_connect);
    if connect {
        HttpErrorKind::Connect
    } else {
        e.kind()
    }
}

/// `response` with a body that passes at most what `budget` grants, and then fails
/// ([`HttpErrorKind::Decode`]): object_store reads listing pages and credentials whole, and
/// this is how much "whole" can be. The budget remembers that it was exceeded.
///
/// ```
/// # futures::executor::block_on(async {
/// use fence_wire::body::AnswerBudget;
/// let answer = http::Response::new(object_store::client::HttpResponseBody::from(String::from("0123456789")));
/// let budget = AnswerBudget::new(4);
/// let capped = fence_wire::client::budgeted(answer, budget.clone());
/// assert!(capped.into_body().bytes().await.is_err());
/// assert!(budget.exceeded());
/// # });
/// ```
pub fn budgeted(response: HttpResponse, budget: AnswerBudget) -> HttpResponse {
    let (parts, body) = response.into_parts();
    let body = Budgeted::new(body, budget, over_budget);
    HttpResponse::from_parts(parts, HttpResponseBody::new(body))
}

fn over_budget(budget: &AnswerBudget) -> HttpError {
    let message = format!("the answer passed its limit of {} bytes", budget.spent());
    HttpError::new(HttpErrorKind::Decode, std::io::Error::other(message))
}

/// The first [`ERROR_BODY_LIMIT`] bytes of an error answer's body; the rest is never read
/// (the connection is closed, not drained).
pub async fn error_body_start(body: HttpResponseBody) -> Result<Bytes, HttpError> {
    read_prefix(body.bytes_stream(), ERROR_BODY_LIMIT).await
}

/// The error answer object_store gets instead of `parts` + `body_start`: the same status and
/// headers, and a body of only `code` and the (bounded) `<Message>` (see
/// [`crate::error_body`]). Returns that code too: `code` if given (a header's), else the
/// body's `<Code>`.
pub fn sanitized_answer(
    mut parts: http::response::Parts,
    code: Option<String>,
    body_start: &[u8],
) -> (Option<String>, HttpResponse) {
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let code = code.or_else(|| error_code(body_start));
    let message = xml_element(body_start, "Message");
    let clean = sanitized(code.as_deref(), message.as_deref());
    (code, HttpResponse::from_parts(parts, clean.into()))
}

fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes" | "on"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
