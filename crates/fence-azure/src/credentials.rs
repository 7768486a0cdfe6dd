//! What an operator is told when an [`AzureStore`](crate::AzureStore) gets no credentials.
//!
//! With an account but no credential configured (no key, SAS, token, service principal,
//! workload identity, Azure CLI or emulator), object_store asks the managed identity endpoint
//! (IMDS, `http://169.254.169.254/metadata/identity/oauth2/token`, or `AZURE_MSI_ENDPOINT`).
//! fence keeps that, but asks it through object_store's own HTTP client rather than the
//! store's observing one, so its answer is never taken for the container's; and when it gives
//! no token, the error is a [`CredentialsUnavailable`] naming what was tried and what to set.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use object_store::azure::{AzureConfigKey, AzureCredential, MicrosoftAzureBuilder};
use object_store::{BackoffConfig, ClientConfigKey, CredentialProvider, RetryConfig};

/// The managed identity endpoint object_store asks unless `AZURE_MSI_ENDPOINT` says otherwise.
pub const DEFAULT_MSI_ENDPOINT: &str = "http://169.254.169.254/metadata/identity/oauth2/token";

/// The managed identity endpoint `azure` (an account configured, no emulator) would ask for
/// a token, if no other credential is configured.
pub(crate) fn managed_identity_endpoint(azure: &MicrosoftAzureBuilder) -> Option<String> {
    let get = |key| azure.get_config_value(&key).filter(|v| !v.is_empty());
    let truthy = |key| {
        get(key).is_some_and(|v: String| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "1" | "true" | "on" | "yes" | "y"
            )
        })
    };
    let configured = [
        AzureConfigKey::AccessKey,
        AzureConfigKey::SasKey,
        AzureConfigKey::Token,
        AzureConfigKey::ClientSecret,
        AzureConfigKey::FederatedTokenFile,
        AzureConfigKey::FabricTokenServiceUrl,
    ]
    .into_iter()
    .any(|k| get(k).is_some());
    let switched = [
        AzureConfigKey::UseAzureCli,
        AzureConfigKey::SkipSignature,
        AzureConfigKey::UseEmulator,
    ]
    .into_iter()
    .any(truthy);
    let typed = get(AzureConfigKey::CredentialType).is_some_and(|t| t != "auto");
    if configured || switched || typed {
        return None;
    }
    Some(get(AzureConfigKey::MsiEndpoint).unwrap_or_else(|| DEFAULT_MSI_ENDPOINT.to_owned()))
}

/// The managed identity endpoint gave the store no token. Its text names what was tried; the
/// endpoint's answer is its `source`.
#[derive(Debug)]
pub struct CredentialsUnavailable {
    endpoint: String,
    cause: object_store::Error,
}

impl CredentialsUnavailable {
    /// The managed identity endpoint asked.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl fmt::Display for CredentialsUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no Azure credentials: none configured (AZURE_STORAGE_ACCOUNT_KEY, \
             AZURE_STORAGE_SAS_KEY, AZURE_STORAGE_TOKEN, AZURE_CLIENT_ID with \
             AZURE_CLIENT_SECRET and AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE, \
             AZURE_USE_AZURE_CLI), and the managed identity endpoint {} gave none",
            self.endpoint
        )
    }
}

impl std::error::Error for CredentialsUnavailable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// The managed identity provider object_store would make, asked through its own HTTP client
/// (one retry, 5 s per request); its failure names what was tried.
#[derive(Debug)]
pub(crate) struct ManagedIdentity {
    inner: Arc<dyn CredentialProvider<Credential = AzureCredential>>,
    endpoint: String,
}

impl ManagedIdentity {
    /// The provider of `azure` (resolved, with its container), on object_store's own client.
    pub(crate) fn new(
        azure: &MicrosoftAzureBuilder,
        endpoint: String,
    ) -> object_store::Result<ManagedIdentity> {
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 1,
            retry_timeout: Duration::from_secs(10),
        };
        let own = azure
            .clone()
            .with_config(AzureConfigKey::Client(ClientConfigKey::Timeout), "5s")
            .with_retry(retry)
            .build()?;
        Ok(ManagedIdentity {
            inner: own.credentials().clone(),
            endpoint,
        })
    }
}

#[async_trait]
impl CredentialProvider for ManagedIdentity {
    type Credential = AzureCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AzureCredential>> {
        self.inner.get_credential().await.map_err(|cause| {
            let e = CredentialsUnavailable {
                endpoint: self.endpoint.clone(),
                cause,
            };
            object_store::Error::Generic {
                store: "MicrosoftAzure",
                source: Box::new(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managed_identity_is_asked_only_when_nothing_else_is_configured() {
        let account = MicrosoftAzureBuilder::new().with_account("acct");
        assert_eq!(
            managed_identity_endpoint(&account).as_deref(),
            Some(DEFAULT_MSI_ENDPOINT)
        );
        let local = account
            .clone()
            .with_config(AzureConfigKey::MsiEndpoint, "http://127.0.0.1:1/token");
        assert_eq!(
            managed_identity_endpoint(&local).as_deref(),
            Some("http://127.0.0.1:1/token")
        );
        for (key, value) in [
            (AzureConfigKey::AccessKey, "a2V5"),
            (AzureConfigKey::SasKey, "sv=1&sig=x"),
            (AzureConfigKey::Token, "t"),
            (AzureConfigKey::UseAzureCli, "true"),
            (AzureConfigKey::UseEmulator, "true"),
        ] {
            let configured = account.clone().with_config(key, value);
            assert_eq!(managed_identity_endpoint(&configured), None, "{key:?}");
        }
    }
}
