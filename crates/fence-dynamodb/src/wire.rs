//! One DynamoDB request: a JSON body `POST`ed to the endpoint with
//! `X-Amz-Target: DynamoDB_20120810.<Operation>` and
//! `Content-Type: application/x-amz-json-1.0`, signed with object_store's SigV4 signer
//! (`AwsAuthorizer`, service `dynamodb`), sent once; and its answer, read only up to a cap.

use std::fmt;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use fence_core::{Clock, Error, ErrorKind};
use fence_wire::body::{announced_over, read_prefix, reqwest_chunks};
use fence_wire::error_body::ERROR_BODY_LIMIT;
use object_store::aws::{AwsAuthorizer, AwsCredentialProvider};
use object_store::client::HttpRequestBody;
use serde_json::Value;

use crate::classify::{self, exception, Failure};
use crate::item::ErrorAnswer;

/// The DynamoDB operations fence sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    GetItem,
    PutItem,
    DeleteItem,
    Query,
    DescribeTable,
    CreateTable,
}

impl Op {
    fn target(self) -> &'static str {
        match self {
            Op::GetItem => "DynamoDB_20120810.GetItem",
            Op::PutItem => "DynamoDB_20120810.PutItem",
            Op::DeleteItem => "DynamoDB_20120810.DeleteItem",
            Op::Query => "DynamoDB_20120810.Query",
            Op::DescribeTable => "DynamoDB_20120810.DescribeTable",
            Op::CreateTable => "DynamoDB_20120810.CreateTable",
        }
    }
}

/// Who signs the requests, for which region.
#[derive(Clone)]
pub(crate) struct Signer {
    pub region: String,
    /// `None`: requests go unsigned (`AWS_SKIP_SIGNATURE=true`).
    pub credentials: Option<AwsCredentialProvider>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .field("signed", &self.credentials.is_some())
            .finish()
    }
}

/// An answer: its status and its body, read up to the cap its status allows.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Body,
}

/// An answer's body, as far as it was read.
#[derive(Debug)]
pub(crate) enum Body {
    /// The whole body.
    Whole(Bytes),
    /// The body is longer than its cap: it was read no further, and only its start is kept
    /// (where an error answer names its exception).
    OverCap {
        /// The body's first bytes (at most 4 KiB).
        start: Bytes,
    },
    /// The body broke off.
    Broken(reqwest::Error),
}

impl Body {
    /// The whole body, or why not as a failure of `status`'s answer.
    pub fn whole(&self) -> Option<&Bytes> {
        match self {
            Body::Whole(b) => Some(b),
            _ => None,
        }
    }
}

/// How much of an answer's body is read, by its status: a success and a 400 (which may carry
/// the item of a failed condition) up to their caps, anything else up to the start of an
/// error body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub ok: usize,
    pub refused: usize,
}

/// Sends `request` as `op` through `client`, signed by `signer`, once; the whole exchange,
/// credentials and body included, bounded by `bound`.
pub(crate) async fn call(
    client: &reqwest::Client,
    endpoint: &str,
    signer: &Signer,
    (op, request): (Op, &Value),
    bound: Duration,
    caps: Caps,
) -> Result<Answer, Error> {
    let clock = Clock::system();
    let started = clock.mono_ms();
    let exchange = async {
        let req = signed(endpoint, signer, op, request).await?;
        let left = bound.saturating_sub(Duration::from_millis(clock.mono_ms() - started));
        let mut req = req;
        *req.timeout_mut() = Some(left.max(Duration::from_millis(1)));
        let resp = client.execute(req).await.map_err(transport_error)?;
        Ok(receive(resp, caps).await)
    };
    match tokio::time::timeout(bound, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(failure(classify::transport(false, true))),
    }
}

/// The request, signed: nothing has been sent yet, so every failure here is not committed.
async fn signed(
    endpoint: &str,
    signer: &Signer,
    op: Op,
    request: &Value,
) -> Result<reqwest::Request, Error> {
    let body = Bytes::from(serde_json::to_vec(request).map_err(|e| unsent(e.to_string()))?);
    let mut req = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("{endpoint}/"))
        .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.0")
        .header("x-amz-target", op.target())
        .body(HttpRequestBody::from(body.clone()))
        .map_err(|e| unsent(e.to_string()))?;
    if let Some(provider) = &signer.credentials {
        let credential = provider.get_credential().await.map_err(|e| {
            Error::new(
                ErrorKind::PermissionDenied,
                "no AWS credentials to sign with",
            )
            .with_source(e)
            .not_committed()
        })?;
        AwsAuthorizer::new(&credential, "dynamodb", &signer.region)
            .try_authorize(&mut req, None)
            .map_err(|e| unsent(e.to_string()))?;
    }
    let (parts, _) = req.into_parts();
    let req = http::Request::from_parts(parts, reqwest::Body::from(body));
    reqwest::Request::try_from(req).map_err(|e| unsent(e.to_string()))
}

fn unsent(why: String) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("the request could not be made: {why}"),
    )
    .not_committed()
}

/// Reads the answer's body within the cap of its status.
async fn receive(resp: reqwest::Response, caps: Caps) -> Answer {
    let status = resp.status().as_u16();
    let cap = match status {
        200 => caps.ok,
        400 => caps.refused,
        _ => {
            let start = read_prefix(reqwest_chunks(resp), ERROR_BODY_LIMIT).await;
            let body = start.map_or_else(Body::Broken, Body::Whole);
            return Answer { status, body };
        }
    };
    let body = match announced_over(resp.content_length(), cap) {
        true => match read_prefix(reqwest_chunks(resp), ERROR_BODY_LIMIT).await {
            Ok(start) => Body::OverCap { start },
            Err(e) => Body::Broken(e),
        },
        false => read_within(resp, cap).await,
    };
    Answer { status, body }
}

/// Reads `resp`'s body up to `cap`; past it, keeps the body's start and reads no further
/// (the connection is closed, not drained).
async fn read_within(mut resp: reqwest::Response, cap: usize) -> Body {
    let mut body = BytesMut::new();
    loop {
        match resp.chunk().await {
            Ok(None) => return Body::Whole(body.freeze()),
            Ok(Some(chunk)) if chunk.len() <= cap - body.len() => body.extend_from_slice(&chunk),
            Ok(Some(chunk)) => {
                let keep = ERROR_BODY_LIMIT.saturating_sub(body.len()).min(chunk.len());
                body.extend_from_slice(&chunk[..keep]);
                body.truncate(ERROR_BODY_LIMIT);
                return Body::OverCap {
                    start: body.freeze(),
                };
            }
            Err(e) => return Body::Broken(e),
        }
    }
}

/// A reqwest failure without a status. reqwest's errors name the URL (the endpoint, never a
/// secret: credentials travel in headers).
pub(crate) fn transport_error(e: reqwest::Error) -> Error {
    failure(classify::transport(e.is_connect(), e.is_timeout())).with_source(e)
}

/// A classified failure as fence's error.
pub(crate) fn failure(f: Failure) -> Error {
    Error::new(f.kind, f.why).with_commit(f.commit)
}

/// What an error answer said: its status, and the exception and message of its body if it
/// could be read (the message cut to 256 bytes and shown escaped). The `source` of fence's
/// error; DynamoDB's messages name no credential.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub status: u16,
    code: Option<String>,
    message: Option<String>,
}

/// The longest message of an error answer kept.
const MAX_MESSAGE: usize = 256;

impl Refusal {
    /// What the answer of `status` with `body` said.
    pub fn of(status: u16, body: &Body) -> Refusal {
        let mut answer = body
            .whole()
            .and_then(|b| serde_json::from_slice::<ErrorAnswer>(b).ok())
            .unwrap_or_default();
        if let (None, Body::OverCap { start }) = (&answer.kind, body) {
            // A refusal longer than its cap (a rejection carrying an item past the record
            // limit): its exception is named at its start, as DynamoDB writes `__type` first.
            answer.kind = type_at_start(start);
        }
        let mut message = answer.message;
        if let Some(m) = &mut message {
            let mut end = m.len().min(MAX_MESSAGE);
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            m.truncate(end);
        }
        Refusal {
            status,
            code: answer.kind.as_deref().map(|k| exception(k).to_owned()),
            message,
        }
    }

    /// The exception's name (`ValidationException`), if the body said.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DynamoDB answered HTTP {}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code:?}")?;
        }
        match &self.message {
            Some(m) => write!(f, ": {m:?}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Refusal {}

/// The `__type` of a JSON error answer of which only `start` was read: the string after the
/// first `"__type"` and its colon.
fn type_at_start(start: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(start);
    let rest = text.split_once("\"__type\"")?.1.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let name = rest.split_once('"')?.0;
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"#._-".contains(&b));
    plain.then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_of_a_cut_error_answer_is_read_from_its_start() {
        let start = br#"{ "__type" : "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException", "Item": {"b": {"S": "xxxx"#;
        let code = type_at_start(start).map(|t| exception(&t).to_owned());
        assert_eq!(code.as_deref(), Some("ConditionalCheckFailedException"));
        assert_eq!(type_at_start(br#"{"Item": {"#), None);
        assert_eq!(type_at_start(br#"{"__type":"a\u0022b"}"#), None);
    }
}
