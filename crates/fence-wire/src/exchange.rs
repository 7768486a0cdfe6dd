//! The HTTP layer the object_store adapters put under object_store's clients: fence's own
//! reqwest client (redirects off, see [`crate::client`]), a record of what every attempt of
//! an operation came to — the status and error code of the answer, or the transport failure:
//! the facts object_store's own errors do not expose and a conditional write's classification
//! needs — and the bounds of what object_store reads:
//!
//! - an error answer's body is read only up to
//!   [`ERROR_BODY_LIMIT`](crate::error_body::ERROR_BODY_LIMIT) and handed on as its code
//!   and message only (an AWS `SignatureDoesNotMatch` body echoes the canonical request and
//!   the signature, an Azure `AuthenticationFailed` one the string the server signed, and
//!   object_store puts whole error bodies into its error text);
//! - every other body passes only as far as its operation's [`AnswerBudget`] allows
//!   (object_store reads listing pages and credentials whole);
//! - a success answer with several different `ETag`s loses them all (object_store would take
//!   the first), and several different error-code headers record [`CONFLICTING_CODES`].
//!
//! An operation finds its [`Exchange`] through its request's extensions
//! ([`Exchange::extensions`]) or, for object_store calls that take none, by running inside
//! [`Exchange::observe`].

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use fence_core::Error;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::ClientOptions;

use crate::body::AnswerBudget;
use crate::client::{
    budgeted, error_body_start, redirect_free_client, sanitized_answer, transport_kind, Timeouts,
    CONTROL_ANSWER_LIMIT,
};
use crate::headers::{drop_unusable, single, Header};
use crate::listing::{collect, ListingLimits, Page, PageAsk, NAMES_PER_PAGE};

/// What one HTTP attempt of a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The store answered with this status and, for error answers, this error code (from the
    /// store's error-code header, else the `<Code>` at the start of the body).
    Answer {
        /// The HTTP status.
        status: u16,
        /// The store's error code, if it gave one.
        code: Option<String>,
    },
    /// No (complete) answer: the transport failed. A failed connect (refused, unreachable, or
    /// timed out while connecting) is `Connect`, whatever else is true of it.
    Transport(HttpErrorKind),
}

/// The code recorded for an answer whose error-code headers disagree: it matches no store's
/// code, so no classification reads it as a verdict.
pub const CONFLICTING_CODES: &str = "(several different error-code headers)";

/// Attempts an [`Exchange`] keeps; older ones are dropped (only the last ones classify).
const KEPT: usize = 8;

tokio::task_local! {
    /// The exchange of the store operation being polled in this task.
    static CURRENT: Exchange;
}

/// The attempts of one store operation (the last few), shared between the operation and the
/// HTTP layer, and the budget of its answers' bodies (none: [`CONTROL_ANSWER_LIMIT`] for each
/// answer). No attempt recorded means nothing reached the network.
///
/// ```
/// use fence_wire::exchange::Exchange;
/// let exchange = Exchange::with_budget(5 << 20);
/// assert_eq!(exchange.last(), None);
/// assert!(!exchange.over_budget());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    attempts: Arc<Mutex<VecDeque<Observed>>>,
    budget: Option<AnswerBudget>,
}

impl Exchange {
    /// An exchange whose answers' bodies may bring `bytes` in total.
    pub fn with_budget(bytes: u64) -> Exchange {
        Exchange {
            attempts: Arc::default(),
            budget: Some(AnswerBudget::new(bytes)),
        }
    }

    /// Whether an answer passed the budget.
    pub fn over_budget(&self) -> bool {
        self.budget.as_ref().is_some_and(AnswerBudget::exceeded)
    }

    /// The answer bytes the budget granted so far.
    pub fn spent(&self) -> u64 {
        self.budget.as_ref().map_or(0, AnswerBudget::spent)
    }

    /// Runs `operation` (an object_store call) with the HTTP attempts it makes in this task
    /// recorded here, for calls whose requests carry no [`Exchange::extensions`].
    pub async fn observe<F: Future>(&self, operation: F) -> F::Output {
        CURRENT.scope(self.clone(), operation).await
    }

    /// Request extensions carrying this exchange.
    pub fn extensions(&self) -> object_store::Extensions {
        let mut extensions = object_store::Extensions::new();
        extensions.insert(self.clone());
        extensions
    }

    /// Records one attempt.
    pub fn record(&self, observed: Observed) {
        let mut attempts = self.attempts();
        if attempts.len() >= KEPT {
            attempts.pop_front();
        }
        attempts.push_back(observed);
    }

    /// The last attempt, if any request reached the network.
    pub fn last(&self) -> Option<Observed> {
        self.attempts().back().cloned()
    }

    /// The last attempt that failed (a transport failure or a non-2xx answer), else the last
    /// attempt: a 2xx answer object_store could not use.
    pub fn last_failure(&self) -> Option<Observed> {
        let failed = |o: &&Observed| {
            !matches!(
                o,
                Observed::Answer {
                    status: 200..=299,
                    ..
                }
            )
        };
        let last_failed = self.attempts().iter().rev().find(failed).cloned();
        last_failed.or_else(|| self.last())
    }

    /// The exchange of `request`: its extension, else the one [`Exchange::observe`] set.
    fn of(request: &HttpRequest) -> Option<Exchange> {
        let tagged = request.extensions().get::<Exchange>().cloned();
        tagged.or_else(|| CURRENT.try_with(Exchange::clone).ok())
    }

    fn answer_budget(&self) -> AnswerBudget {
        self.budget
            .clone()
            .unwrap_or_else(|| AnswerBudget::new(CONTROL_ANSWER_LIMIT))
    }

    fn attempts(&self) -> MutexGuard<'_, VecDeque<Observed>> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Makes each object_store client's HTTP client: fence's reqwest client (redirects off,
/// bounded by `timeouts`) under the observing, bounding layer of this module. Every connect
/// makes a new client, so each store client has its own connection pool.
#[derive(Debug, Clone, Copy)]
pub struct ObservingConnector {
    /// The request and connect timeouts.
    pub timeouts: Timeouts,
    /// The user agent unless the options set one (also the store name of a build error).
    pub agent: &'static str,
    /// The header that carries the store's error code, if it has one (`x-ms-error-code`).
    pub code_header: Option<&'static str>,
}

impl HttpConnector for ObservingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let client = redirect_free_client(options, self.timeouts, self.agent).map_err(|e| {
            object_store::Error::Generic {
                store: self.agent,
                source: Box::new(e.without_url()),
            }
        })?;
        Ok(HttpClient::new(ObservingService {
            inner: HttpClient::new(client),
            code_header: self.code_header,
        }))
    }
}

#[derive(Debug)]
struct ObservingService {
    inner: HttpClient,
    code_header: Option<&'static str>,
}

#[async_trait]
impl HttpService for ObservingService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let exchange = Exchange::of(&request).unwrap_or_default();
        match self.inner.execute(request).await {
            Err(e) => {
                exchange.record(Observed::Transport(transport_kind(&e)));
                Err(e)
            }
            Ok(mut response) if response.status().is_success() => {
                let status = response.status().as_u16();
                drop_unusable(response.headers_mut(), "etag");
                exchange.record(Observed::Answer { status, code: None });
                Ok(budgeted(response, exchange.answer_budget()))
            }
            Ok(response) => Ok(self.cut_error_answer(&exchange, response).await),
        }
    }
}

impl ObservingService {
    /// Records an error answer's code, and hands on an answer whose body carries only that
    /// code and the (bounded) `<Message>`. A body that cannot be read is handed on empty:
    /// the status alone is the answer.
    async fn cut_error_answer(&self, exchange: &Exchange, response: HttpResponse) -> HttpResponse {
        let status = response.status().as_u16();
        let header = self
            .code_header
            .and_then(|h| header_code(response.headers(), h));
        let (parts, body) = response.into_parts();
        let start = error_body_start(body).await.unwrap_or_default();
        let (code, answer) = sanitized_answer(parts, header, &start);
        exchange.record(Observed::Answer { status, code });
        answer
    }
}

/// Lists every object under `under/` (the whole bucket for `None`) through `store`, an
/// object_store client over an [`ObservingConnector`]: page by page within `limits`, each
/// page's answer bounded by what is left, keeping what `keep` maps to `Some`. A page that
/// fails otherwise is classified by `failed` from its exchange.
pub async fn list_names<T>(
    store: &impl PaginatedListStore,
    under: Option<&Path>,
    limits: ListingLimits,
    keep: impl Fn(&str) -> Option<T>,
    failed: impl Fn(&Exchange, object_store::Error) -> Error,
) -> Result<Vec<T>, Error> {
    let prefix = under.map(|p| format!("{p}/"));
    let (prefix, failed) = (prefix.as_deref(), &failed);
    let read_page = |ask: PageAsk| async move {
        let exchange = Exchange::with_budget(ask.budget);
        let opts = PaginatedListOptions {
            page_token: ask.token,
            max_keys: Some(NAMES_PER_PAGE),
            extensions: exchange.extensions(),
            ..PaginatedListOptions::default()
        };
        match store.list_paginated(prefix, opts).await {
            Ok(page) => Ok(Page::listed(page, exchange.spent())),
            Err(e) if exchange.over_budget() => Err(ask.over.error().with_source(e)),
            Err(e) => Err(failed(&exchange, e)),
        }
    };
    collect(limits, read_page, keep).await
}

/// The error code in header `name`: its one value, [`CONFLICTING_CODES`] for several
/// different ones, `None` if absent or empty.
///
/// ```
/// use fence_wire::exchange::{header_code, CONFLICTING_CODES};
/// let mut headers = http::HeaderMap::new();
/// assert_eq!(header_code(&headers, "x-ms-error-code"), None);
/// headers.append("x-ms-error-code", "ConditionNotMet".parse().unwrap());
/// assert_eq!(header_code(&headers, "x-ms-error-code").as_deref(), Some("ConditionNotMet"));
/// headers.append("x-ms-error-code", "BlobAlreadyExists".parse().unwrap());
/// assert_eq!(header_code(&headers, "x-ms-error-code").as_deref(), Some(CONFLICTING_CODES));
/// ```
pub fn header_code(headers: &http::HeaderMap, name: &str) -> Option<String> {
    match single(headers, name) {
        Header::One("") | Header::Absent => None,
        Header::One(code) => Some(code.to_string()),
        Header::Unusable => Some(CONFLICTING_CODES.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_body::ERROR_BODY_LIMIT;

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
    }

    #[test]
    fn clones_share_one_record_and_one_budget() {
        let exchange = Exchange::with_budget(10);
        let clone = exchange.clone();
        clone.record(Observed::Transport(HttpErrorKind::Timeout));
        clone.answer_budget().take(11);
        assert_eq!(
            exchange.last(),
            Some(Observed::Transport(HttpErrorKind::Timeout))
        );
        assert!(exchange.over_budget());
        assert_eq!(exchange.spent(), 10);
    }

    #[test]
    fn without_a_budget_each_answer_gets_the_control_limit() {
        let exchange = Exchange::default();
        assert_eq!(exchange.answer_budget().left(), CONTROL_ANSWER_LIMIT);
        exchange.answer_budget().take(CONTROL_ANSWER_LIMIT);
        assert_eq!(exchange.answer_budget().left(), CONTROL_ANSWER_LIMIT);
        assert!(ERROR_BODY_LIMIT as u64 <= CONTROL_ANSWER_LIMIT);
    }
}
