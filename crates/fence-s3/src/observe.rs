//! Sees every HTTP exchange of a request that carries an [`Exchange`] extension: the status
//! and S3 error code of the answer, or the transport failure — the facts object_store's own
//! error does not expose, and the ones a conditional write's classification needs.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;

/// What one HTTP attempt of a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// The store answered with this status and, for error answers, this S3 error `<Code>`.
    Answer { status: u16, code: Option<String> },
    /// No (complete) answer: the transport failed.
    Transport(HttpErrorKind),
}

/// A per-request record of its HTTP attempts, passed to the client as a request extension.
///
/// No attempt recorded means the request never reached the network.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exchange(Arc<Mutex<Vec<Observed>>>);

impl Exchange {
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

    /// Request extensions carrying this exchange.
    pub(crate) fn extensions(&self) -> object_store::Extensions {
        let mut extensions = object_store::Extensions::new();
        extensions.insert(self.clone());
        extensions
    }
}

/// An [`HttpConnector`] whose clients record each attempt into the request's [`Exchange`].
/// Every connect makes a new reqwest client, so each store built with it has its own pool.
#[derive(Debug, Default)]
pub(crate) struct ObservingConnector;

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(ObservingService { inner }))
    }
}

#[derive(Debug)]
struct ObservingService {
    inner: HttpClient,
}

#[async_trait]
impl HttpService for ObservingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let Some(exchange) = request.extensions().get::<Exchange>().cloned() else {
            return self.inner.execute(request).await;
        };
        match self.inner.execute(request).await {
            Err(e) => {
                exchange.record(Observed::Transport(e.kind()));
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

/// Reads an error answer's (small) body for its S3 `<Code>`, then hands it on unchanged.
async fn observe_error_answer(
    exchange: &Exchange,
    response: HttpResponse,
) -> Result<HttpResponse, HttpError> {
    let status = response.status().as_u16();
    let (parts, body) = response.into_parts();
    match body.bytes().await {
        Ok(bytes) => {
            let code = s3_error_code(&bytes);
            exchange.record(Observed::Answer { status, code });
            Ok(HttpResponse::from_parts(parts, bytes.into()))
        }
        Err(e) => {
            exchange.record(Observed::Answer { status, code: None });
            Err(e)
        }
    }
}

/// The `<Code>` of an S3 XML error body, if there is one.
pub(crate) fn s3_error_code(body: &[u8]) -> Option<String> {
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
        let body =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>x</Message></Error>";
        assert_eq!(s3_error_code(body).as_deref(), Some("NoSuchBucket"));
        assert_eq!(s3_error_code(b"<Error></Error>"), None);
        assert_eq!(s3_error_code(b"<Code></Code>"), None);
        assert_eq!(s3_error_code(&[0xff, 0xfe]), None);
    }
}
