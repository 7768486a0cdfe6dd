//! [`AzureStoreBuilder`]: configuration of an [`AzureStore`], in object_store's builder style.

use std::fmt;
use std::sync::Arc;

use fence_core::{Error, ErrorKind};
use fence_wire::names::Location;
use fence_wire::options::StoreOptions;
use object_store::azure::{AzureConfigKey, MicrosoftAzure, MicrosoftAzureBuilder};
use object_store::client::HttpClient;
use object_store::{ClientConfigKey, ClientOptions};

use crate::credentials::{managed_identity_endpoint, ManagedIdentity};
use crate::observe::{connector, fence_http_client};
use crate::store::{AzureStore, Clients};
use fence_wire::client::Timeouts;

pub use fence_wire::options::DEFAULT_LEASE_TTL;

/// The well-known account of Azurite and the legacy Azure Storage Emulator.
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";

/// The published key of [`EMULATOR_ACCOUNT`] (Microsoft's documentation prints it; it only
/// opens local emulators).
const EMULATOR_ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Configures an [`AzureStore`]: account, credentials, container and key prefix, and the
/// timeouts of its clients (see the crate docs).
///
/// `Debug` never shows account keys, SAS tokens or bearer tokens.
///
/// ```
/// use std::time::Duration;
/// use fence_azure::AzureStore;
/// let store = AzureStore::builder()
///     .with_url("az://my-container/fleet-a")
///     .with_account("myaccount")
///     .with_access_key("bm90LWEtcmVhbC1rZXk=")
///     .with_lease_ttl(Duration::from_secs(6))
///     .build()
///     .unwrap();
/// assert_eq!(store.container(), "my-container");
/// assert_eq!(store.prefix(), "fleet-a");
/// assert!(!format!("{store:?}").contains("bm90LWEtcmVhbC1rZXk="));
/// ```
#[derive(Clone)]
pub struct AzureStoreBuilder {
    azure: MicrosoftAzureBuilder,
    location: Location,
    emulator: Option<String>,
    options: StoreOptions,
}

impl Default for AzureStoreBuilder {
    fn default() -> Self {
        Self::from_azure(MicrosoftAzureBuilder::new())
    }
}

impl AzureStoreBuilder {
    /// An empty builder: set at least the container (or URL), the account and a credential.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads object_store's `AZURE_*` environment variables: `AZURE_STORAGE_ACCOUNT_NAME`,
    /// `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_KEY`, `AZURE_STORAGE_TOKEN`,
    /// `AZURE_CLIENT_ID`/`AZURE_CLIENT_SECRET`/`AZURE_TENANT_ID`, `AZURE_ENDPOINT`,
    /// `AZURE_CONTAINER_NAME`, `AZURE_ALLOW_HTTP`, … and the emulator switch
    /// `AZURE_STORAGE_USE_EMULATOR=true`, with which object_store talks to
    /// `AZURITE_BLOB_STORAGE_URL` (default `http://127.0.0.1:10000`) as the development account
    /// [`EMULATOR_ACCOUNT`] with its published key.
    pub fn from_env() -> Self {
        Self::from_azure(MicrosoftAzureBuilder::from_env())
    }

    fn from_azure(azure: MicrosoftAzureBuilder) -> Self {
        AzureStoreBuilder {
            azure,
            location: Location::default(),
            emulator: None,
            options: StoreOptions::default(),
        }
    }

    /// Container and optional key prefix from `az://container/prefix/path` or
    /// `azure://container/prefix/path`.
    pub fn with_url(mut self, url: impl AsRef<str>) -> Self {
        self.location.set_url(url.as_ref(), &["az", "azure"]);
        self
    }

    /// The container.
    pub fn with_container(mut self, container: impl Into<String>) -> Self {
        self.location.bucket = Some(container.into());
        self
    }

    /// Every key is stored under `prefix/` (validated like a [`Key`](fence_core::Key)).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.location.prefix = Some(prefix.into());
        self
    }

    /// The storage account.
    pub fn with_account(mut self, account: impl Into<String>) -> Self {
        self.azure = self.azure.with_account(account);
        self
    }

    /// The account's shared key (base64). Never shown by `Debug` or in errors.
    pub fn with_access_key(mut self, key: impl Into<String>) -> Self {
        self.azure = self.azure.with_access_key(key);
        self
    }

    /// The blob service endpoint, e.g. `https://myaccount.blob.core.windows.net` (the default
    /// for the account) or a private endpoint.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.azure = self.azure.with_endpoint(endpoint.into());
        self
    }

    /// The blob service endpoint, if one is set (`AZURE_ENDPOINT` or
    /// [`with_endpoint`](Self::with_endpoint)); `None`: the account's own on Azure, or the
    /// emulator.
    pub fn endpoint(&self) -> Option<String> {
        let endpoint = self.azure.get_config_value(&AzureConfigKey::Endpoint);
        endpoint.filter(|e| !e.is_empty() && self.emulator.is_none())
    }

    /// The managed identity endpoint the store will ask for a token at its first request,
    /// if no other credential (and no emulator) is configured: `AZURE_MSI_ENDPOINT`, else
    /// [`DEFAULT_MSI_ENDPOINT`](crate::credentials::DEFAULT_MSI_ENDPOINT).
    ///
    /// ```
    /// use fence_azure::{credentials::DEFAULT_MSI_ENDPOINT, AzureStore};
    /// let bare = AzureStore::builder().with_account("acct");
    /// assert_eq!(bare.managed_identity_endpoint().as_deref(), Some(DEFAULT_MSI_ENDPOINT));
    /// let keyed = bare.with_access_key("a2V5");
    /// assert_eq!(keyed.managed_identity_endpoint(), None);
    /// ```
    pub fn managed_identity_endpoint(&self) -> Option<String> {
        match self.emulator {
            Some(_) => None,
            None => managed_identity_endpoint(&self.azure),
        }
    }

    /// Talks to a local emulator (Azurite) at `blob_url`, e.g. `http://127.0.0.1:10000`, as
    /// the development account [`EMULATOR_ACCOUNT`] with its published key, unless an account
    /// and key are set. Plain HTTP is allowed.
    pub fn with_emulator(mut self, blob_url: impl Into<String>) -> Self {
        self.emulator = Some(blob_url.into().trim_end_matches('/').to_string());
        self
    }

    /// Allows plain-HTTP endpoints (local test servers).
    pub fn with_allow_http(mut self, allow: bool) -> Self {
        self.azure = self.azure.with_allow_http(allow);
        self
    }

    /// Any other object_store Azure option (credentials, proxy, …), as in its
    /// [`AzureConfigKey`](https://docs.rs/object_store/0.14/object_store/azure/enum.AzureConfigKey.html).
    pub fn with_config(mut self, key: AzureConfigKey, value: impl Into<String>) -> Self {
        self.azure = self.azure.with_config(key, value);
        self
    }

    fence_wire::store_option_setters!(options);

    /// Builds the store: a client for conditional writes and deletes (no retries, no
    /// redirects, short timeouts) and one for reads (retries on), on separate connection
    /// pools. No I/O happens here.
    pub fn build(self) -> Result<AzureStore, Error> {
        let names = self.location.names()?;
        let container = self.container_name()?;
        self.check_account()?;
        let base = self.credentials(self.resolved().with_container_name(&container), &container)?;
        let options = self.options;
        let timeouts = options.cas_timeouts();
        let cas = base
            .clone()
            .with_retry(options.cas_retry())
            .with_http_connector(connector(timeouts));
        let read = base
            .clone()
            .with_retry(options.read_retry())
            .with_http_connector(connector(options.read_timeouts()));
        let (cas, read) = (
            build_client(cas, &container)?,
            build_client(read, &container)?,
        );
        let deletes = if self.signs_deletes() {
            Some(delete_client(
                &base,
                self.emulator.is_some(),
                timeouts,
                &container,
            )?)
        } else {
            None
        };
        let clients = Clients { cas, read, deletes };
        Ok(AzureStore::new(
            clients,
            container,
            names,
            timeouts.request,
            options.limits,
        ))
    }

    /// The object_store builder with the emulator (if set) spelled out as an endpoint, so
    /// the URL comes from here and not from the process environment.
    fn resolved(&self) -> MicrosoftAzureBuilder {
        let Some(url) = &self.emulator else {
            return self.azure.clone();
        };
        let get = |key| self.azure.get_config_value(&key);
        let account = get(AzureConfigKey::AccountName).unwrap_or(EMULATOR_ACCOUNT.into());
        let mut azure = self
            .azure
            .clone()
            .with_use_emulator(false)
            .with_endpoint(format!("{url}/{account}"))
            .with_account(&account)
            .with_allow_http(true);
        if get(AzureConfigKey::AccessKey).is_none() && get(AzureConfigKey::SasKey).is_none() {
            azure = azure.with_access_key(EMULATOR_ACCOUNT_KEY);
        }
        azure
    }

    /// Whether deletes can be sent (they go out under a short-lived SAS that object_store
    /// signs with the account key or a user delegation key): not with a caller's own SAS
    /// token or without signatures.
    fn signs_deletes(&self) -> bool {
        let get = |key| self.azure.get_config_value(&key);
        let flag = |key| get(key).as_deref() == Some("true");
        if flag(AzureConfigKey::SkipSignature) {
            return false;
        }
        if get(AzureConfigKey::CredentialType).as_deref() == Some("sas_token") {
            return false;
        }
        let other_credential = get(AzureConfigKey::AccessKey).is_some()
            || get(AzureConfigKey::Token).is_some()
            || get(AzureConfigKey::ClientId).is_some()
            || flag(AzureConfigKey::UseAzureCli);
        get(AzureConfigKey::SasKey).is_none() || other_credential
    }

    /// `base` with a managed identity asked on object_store's own client, naming what was
    /// tried when it gives no token (see [`crate::credentials`]); unchanged when another
    /// credential (or the emulator) is configured.
    fn credentials(
        &self,
        base: MicrosoftAzureBuilder,
        container: &str,
    ) -> Result<MicrosoftAzureBuilder, Error> {
        let endpoint = match managed_identity_endpoint(&base) {
            Some(endpoint) if self.emulator.is_none() => endpoint,
            _ => return Ok(base),
        };
        let provider =
            ManagedIdentity::new(&base, endpoint).map_err(|e| configuration_error(e, container))?;
        Ok(base.with_credentials(Arc::new(provider)))
    }

    /// An account, or the emulator: object_store would say only "Account must be specified".
    fn check_account(&self) -> Result<(), Error> {
        let get = |key| self.azure.get_config_value(&key).filter(|v| !v.is_empty());
        let emulator = self.emulator.is_some()
            || get(AzureConfigKey::UseEmulator).is_some_and(|v| {
                matches!(
                    v.to_ascii_lowercase().as_str(),
                    "true" | "1" | "yes" | "on" | "y"
                )
            });
        if emulator || get(AzureConfigKey::AccountName).is_some() {
            return Ok(());
        }
        Err(invalid(
            "no Azure storage account: set AZURE_STORAGE_ACCOUNT_NAME and one credential \
             (AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, AZURE_STORAGE_TOKEN, or \
             AZURE_CLIENT_ID with AZURE_CLIENT_SECRET and AZURE_TENANT_ID), or \
             AZURE_STORAGE_USE_EMULATOR=true for Azurite (in code: with_account, with_emulator)"
                .to_owned(),
        ))
    }

    fn container_name(&self) -> Result<String, Error> {
        let container = self
            .location
            .bucket
            .clone()
            .or_else(|| self.azure.get_config_value(&AzureConfigKey::ContainerName))
            .unwrap_or_default();
        if !is_container_name(&container) {
            return Err(invalid(format!(
                "container name {container:?} is missing or invalid (3-63 characters: lowercase \
                 letters, digits and single hyphens, starting with a letter or digit)"
            )));
        }
        Ok(container)
    }
}

/// The HTTP client of deletes, on the conditional-write settings (no redirects, no retries).
fn delete_client(
    base: &MicrosoftAzureBuilder,
    emulator: bool,
    timeouts: Timeouts,
    container: &str,
) -> Result<HttpClient, Error> {
    let mut options = ClientOptions::new();
    for key in [
        ClientConfigKey::AllowHttp,
        ClientConfigKey::AllowInvalidCertificates,
        ClientConfigKey::Http1Only,
        ClientConfigKey::Http2Only,
        ClientConfigKey::ProxyUrl,
        ClientConfigKey::ProxyExcludes,
    ] {
        if let Some(value) = base.get_config_value(&AzureConfigKey::Client(key)) {
            options = options.with_config(key, value);
        }
    }
    let emulator = emulator
        || base
            .get_config_value(&AzureConfigKey::UseEmulator)
            .as_deref()
            == Some("true");
    if emulator {
        options = options.with_allow_http(true);
    }
    fence_http_client(&options, timeouts).map_err(|e| configuration_error(e, container))
}

fn build_client(azure: MicrosoftAzureBuilder, container: &str) -> Result<MicrosoftAzure, Error> {
    azure.build().map_err(|e| configuration_error(e, container))
}

fn configuration_error(e: object_store::Error, container: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("Azure configuration for container {container:?} is invalid"),
    )
    .with_source(e)
    .not_committed()
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidInput, message).not_committed()
}

/// Azure's container naming rules (and the special `$root` and `$web` containers).
fn is_container_name(name: &str) -> bool {
    if name == "$root" || name == "$web" {
        return true;
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    (3..=63).contains(&name.len())
        && name.chars().all(allowed)
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

impl fmt::Debug for AzureStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let account = self.azure.get_config_value(&AzureConfigKey::AccountName);
        f.debug_struct("AzureStoreBuilder")
            .field("account", &account)
            .field("location", &self.location)
            .field("emulator", &self.emulator)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn no_account_is_invalid_input_naming_the_variables() {
        let e = AzureStoreBuilder::new()
            .with_container("fence-test")
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("AZURE_STORAGE_ACCOUNT_NAME"), "{e}");
        let emulator = AzureStoreBuilder::new()
            .with_container("fence-test")
            .with_emulator("http://127.0.0.1:10000");
        assert!(emulator.build().is_ok());
    }

    #[test]
    fn container_names_follow_azure_rules() {
        for good in ["abc", "fence-test", "a1-b2", "$root", &"a".repeat(63)] {
            assert!(is_container_name(good), "{good}");
        }
        for bad in [
            "",
            "ab",
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a--b",
            "a.b",
            &"a".repeat(64),
        ] {
            assert!(!is_container_name(bad), "{bad}");
        }
    }

    #[test]
    fn refuses_bad_configuration_before_any_io() {
        let emulator = || AzureStoreBuilder::new().with_emulator("http://127.0.0.1:1");
        let cases = [
            ("no container", AzureStoreBuilder::new()),
            (
                "not an az:// URL",
                AzureStoreBuilder::new().with_url("s3://x"),
            ),
            ("bad container", emulator().with_container("Not_Valid")),
            (
                "bad prefix",
                emulator().with_container("abc").with_prefix("a/../b"),
            ),
            ("no account", AzureStoreBuilder::new().with_container("abc")),
            (
                "bad key",
                AzureStoreBuilder::new()
                    .with_container("abc")
                    .with_account("acct")
                    .with_access_key("not base64 !!"),
            ),
        ];
        for (case, builder) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{case}");
            assert!(!format!("{err:?}").contains("not base64 !!"), "{case}");
        }
    }

    #[test]
    fn cas_timeout_derives_from_the_lease_ttl() {
        let b = AzureStoreBuilder::new().with_lease_ttl(Duration::from_secs(9));
        assert_eq!(
            b.store_options().cas_timeouts().request,
            Duration::from_secs(3)
        );
        let b = b.with_cas_timeout(Duration::from_millis(700));
        assert_eq!(b.store_options().cas_timeout(), Duration::from_millis(700));
    }

    #[test]
    fn the_emulator_is_the_development_account_at_the_given_url() {
        let b = AzureStoreBuilder::new().with_emulator("http://127.0.0.1:10000/");
        let azure = b.resolved();
        let get = |key| azure.get_config_value(&key);
        assert_eq!(
            get(AzureConfigKey::Endpoint).as_deref(),
            Some("http://127.0.0.1:10000/devstoreaccount1")
        );
        assert_eq!(
            get(AzureConfigKey::AccountName).as_deref(),
            Some(EMULATOR_ACCOUNT)
        );
        assert!(get(AzureConfigKey::AccessKey).is_some());
        assert!(b.signs_deletes());
    }

    #[test]
    fn a_callers_sas_token_cannot_sign_deletes() {
        let sas = AzureStoreBuilder::new()
            .with_account("acct")
            .with_config(AzureConfigKey::SasKey, "sv=2023-11-03&sig=c2VjcmV0");
        assert!(!sas.signs_deletes());
        assert!(sas.clone().with_access_key("a2V5").signs_deletes());
        let anonymous = AzureStoreBuilder::new().with_config(AzureConfigKey::SkipSignature, "true");
        assert!(!anonymous.signs_deletes());
    }

    #[test]
    fn debug_hides_credentials() {
        let b = AzureStoreBuilder::new()
            .with_account("acct")
            .with_access_key("aHVudGVyMi1zZWNyZXQ=")
            .with_config(AzureConfigKey::SasKey, "sv=1&sig=sas-secret")
            .with_config(AzureConfigKey::Token, "bearer-secret")
            .with_config(AzureConfigKey::ClientSecret, "client-secret");
        let text = format!("{b:?}");
        for secret in [
            "aHVudGVyMi1zZWNyZXQ=",
            "sas-secret",
            "bearer-secret",
            "client-secret",
        ] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("acct"));
    }
}
