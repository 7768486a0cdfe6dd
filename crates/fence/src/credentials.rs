//! What a user is told when a store has no credentials: every source tried, and what to set.

use fence_core::Error;

/// The error to report in place of `e` when `e` came from missing credentials: one line
/// naming every source tried, the answer of the service asked (if one was), and what to set.
/// Its kind is [`InvalidInput`](fence_core::ErrorKind::InvalidInput) when no source could be
/// tried at all, [`PermissionDenied`](fence_core::ErrorKind::PermissionDenied) when a
/// service was asked (an instance metadata or managed identity endpoint) and gave none; not
/// committed. `None` for any other error.
///
/// An S3, DynamoDB or Azure store fetches its credentials at its first request, so this error comes
/// from an operation, not from [`open`](crate::open) (which reports what it can see before
/// any I/O itself).
///
/// ```
/// use fence::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::Unavailable, "connection refused");
/// assert!(fence::missing_credentials(&e).is_none());
/// ```
pub fn missing_credentials(e: &Error) -> Option<Error> {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        #[cfg(any(feature = "s3", feature = "dynamodb"))]
        if let Some(missing) = c.downcast_ref::<fence_s3::CredentialsUnavailable>() {
            return Some(s3::explain(missing));
        }
        #[cfg(feature = "azure")]
        if let Some(missing) = c.downcast_ref::<fence_azure::CredentialsUnavailable>() {
            return Some(azure::explain(missing));
        }
        cause = c.source();
    }
    None
}

/// `e`, or the error [`missing_credentials`] makes of it.
#[cfg(any(feature = "s3", feature = "azure", feature = "dynamodb"))]
pub(crate) fn explained(e: Error) -> Error {
    missing_credentials(&e).unwrap_or(e)
}

#[cfg(any(feature = "s3", feature = "dynamodb"))]
mod s3 {
    use fence_core::{Error, ErrorKind};
    use fence_s3::{CredentialSource, CredentialsUnavailable};

    use crate::message::with_causes;

    /// What to set when no source gave credentials.
    const ADVICE: &str = "; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (options \
        access_key_id and secret_access_key; from an AWS CLI profile: eval \"$(aws configure \
        export-credentials --format env)\")";

    pub(super) fn explain(missing: &CredentialsUnavailable) -> Error {
        let source = missing.source_tried();
        let (kind, advice) = match source {
            CredentialSource::InstanceMetadata { disabled: true, .. } => {
                (ErrorKind::InvalidInput, ADVICE)
            }
            CredentialSource::InstanceMetadata { .. } => (ErrorKind::PermissionDenied, ADVICE),
            _ => (ErrorKind::PermissionDenied, ""),
        };
        let line = with_causes(missing.to_string(), std::error::Error::source(missing));
        Error::new(kind, format!("{line}{advice}"))
            .with_source(CredentialsUnavailable::new(source.clone()))
            .not_committed()
    }
}

#[cfg(feature = "azure")]
mod azure {
    use fence_azure::CredentialsUnavailable;
    use fence_core::{Error, ErrorKind};

    use crate::message::with_causes;

    pub(super) fn explain(missing: &CredentialsUnavailable) -> Error {
        let line = with_causes(missing.to_string(), std::error::Error::source(missing));
        Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "{line}; set AZURE_STORAGE_ACCOUNT_KEY (option account_key) or another \
                 credential above"
            ),
        )
        .not_committed()
    }
}
