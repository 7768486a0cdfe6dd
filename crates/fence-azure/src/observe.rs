//! The HTTP layer under object_store's Azure client is [`fence_wire::exchange`]'s: it records
//! what every attempt of a request came to (the status and the `x-ms-error-code` of the
//! answer, or the transport failure), which object_store's own errors do not expose, bounds
//! what object_store reads, and never follows a redirect. Here: its settings for Azure, and
//! the plain client of deletes, which this crate sends and classifies itself.

pub(crate) use fence_wire::client::transport_kind;
use fence_wire::client::{redirect_free_client, Timeouts};
use fence_wire::exchange::{header_code, ObservingConnector};
pub(crate) use fence_wire::exchange::{list_names, Exchange, Observed, CONFLICTING_CODES};
use object_store::client::HttpClient;
use object_store::ClientOptions;

/// Azure's error-code header.
const ERROR_CODE_HEADER: &str = "x-ms-error-code";

const AGENT: &str = concat!("fence-azure/", env!("CARGO_PKG_VERSION"));

/// The HTTP layer of an object_store client bounded by `timeouts`.
pub(crate) fn connector(timeouts: Timeouts) -> ObservingConnector {
    ObservingConnector {
        timeouts,
        agent: AGENT,
        code_header: Some(ERROR_CODE_HEADER),
    }
}

/// A reqwest client of this store, which never follows a redirect (see
/// [`fence_wire::client`]).
pub(crate) fn fence_http_client(
    options: &ClientOptions,
    timeouts: Timeouts,
) -> object_store::Result<HttpClient> {
    let client = redirect_free_client(options, timeouts, AGENT).map_err(|e| {
        object_store::Error::Generic {
            store: AGENT,
            source: Box::new(e.without_url()),
        }
    })?;
    Ok(HttpClient::new(client))
}

/// The `x-ms-error-code` of an answer: its one value, [`CONFLICTING_CODES`] for several
/// different ones, `None` if absent.
pub(crate) fn error_code(headers: &http::HeaderMap) -> Option<String> {
    header_code(headers, ERROR_CODE_HEADER)
}
