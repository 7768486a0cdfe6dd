//! Credentials: explicit anonymous access (emulators), a caller's token provider, or — with the
//! `auth` feature — Google's default credentials for real GCS.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fence_core::{Error, ErrorKind};

/// An OAuth2 bearer token. Its `Debug` never shows the secret.
///
/// ```
/// use fence_gcs::AccessToken;
/// let t = AccessToken::new("ya29.secret");
/// assert_eq!(format!("{t:?}"), "AccessToken(<redacted>)");
/// ```
#[derive(Clone)]
pub struct AccessToken(String);

impl AccessToken {
    /// Wraps a bearer token.
    pub fn new(token: impl Into<String>) -> Self {
        AccessToken(token.into())
    }

    /// The secret, for the `Authorization` header only.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// A source of bearer tokens for real GCS. Called before every request; cache inside.
///
/// Errors should be [`ErrorKind::PermissionDenied`] or [`ErrorKind::Unavailable`]; the store
/// marks them not committed, since nothing reached GCS.
#[async_trait]
pub trait TokenProvider: Send + Sync {
    /// A currently valid token with the `devstorage.read_write` scope.
    async fn token(&self) -> Result<AccessToken, Error>;
}

/// A fixed token (for short-lived tools and tests). Its `Debug` never shows the secret.
///
/// ```
/// use fence_gcs::StaticToken;
/// let provider = StaticToken::new("ya29.secret");
/// assert!(!format!("{provider:?}").contains("ya29"));
/// ```
#[derive(Clone, Debug)]
pub struct StaticToken(AccessToken);

impl StaticToken {
    /// A provider that always answers `token`.
    pub fn new(token: impl Into<String>) -> Self {
        StaticToken(AccessToken::new(token))
    }
}

#[async_trait]
impl TokenProvider for StaticToken {
    async fn token(&self) -> Result<AccessToken, Error> {
        Ok(self.0.clone())
    }
}

/// How requests are authorised.
#[derive(Clone)]
pub(crate) enum Credentials {
    /// No `Authorization` header: emulators, public buckets.
    Anonymous,
    /// A bearer token from the provider on every request.
    Provider(Arc<dyn TokenProvider>),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never delegate to the provider's Debug: it is foreign code and may hold secrets.
        match self {
            Credentials::Anonymous => f.write_str("Anonymous"),
            Credentials::Provider(_) => f.write_str("TokenProvider(<redacted>)"),
        }
    }
}

impl Credentials {
    /// The bearer token to send, if any.
    pub(crate) async fn bearer(&self) -> Result<Option<AccessToken>, Error> {
        match self {
            Credentials::Anonymous => Ok(None),
            Credentials::Provider(p) => p.token().await.map(Some).map_err(Error::not_committed),
        }
    }
}

/// Google's default credentials (service-account file in `GOOGLE_APPLICATION_CREDENTIALS`,
/// gcloud user credentials, or the metadata server when running on Google Cloud), through
/// the `gcp_auth` crate. Only with the `auth` feature; never used for an emulator endpoint.
#[cfg(feature = "auth")]
#[derive(Default)]
pub struct GoogleDefaultCredentials {
    provider: tokio::sync::OnceCell<Arc<dyn gcp_auth::TokenProvider>>,
}

#[cfg(feature = "auth")]
impl fmt::Debug for GoogleDefaultCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GoogleDefaultCredentials")
    }
}

#[cfg(feature = "auth")]
const SCOPES: &[&str] = &["https://www.googleapis.com/auth/devstorage.read_write"];

#[cfg(feature = "auth")]
#[async_trait]
impl TokenProvider for GoogleDefaultCredentials {
    async fn token(&self) -> Result<AccessToken, Error> {
        let provider = self
            .provider
            .get_or_try_init(gcp_auth::provider)
            .await
            .map_err(|e| auth_error("no Google credentials found", e))?;
        let token = provider
            .token(SCOPES)
            .await
            .map_err(|e| auth_error("could not obtain a Google access token", e))?;
        Ok(AccessToken::new(token.as_str()))
    }
}

#[cfg(feature = "auth")]
fn auth_error(what: &str, e: gcp_auth::Error) -> Error {
    // gcp_auth's errors describe the failing source, not the secret.
    Error::new(ErrorKind::PermissionDenied, format!("{what}: {e}")).not_committed()
}

/// The error of a token provider that could not answer in time.
pub(crate) fn token_timeout() -> Error {
    Error::new(ErrorKind::Timeout, "obtaining an access token timed out").not_committed()
}
