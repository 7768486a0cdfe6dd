//! `az://container/prefix` and `azure://container/prefix`: [fence-azure](fence_azure),
//! configured from object_store's `AZURE_*` variables and its [`AzureConfigKey`] names as
//! options; Azurite through `use_emulator` and `azurite_blob_storage_url`, as the variables
//! `AZURE_STORAGE_USE_EMULATOR` and `AZURITE_BLOB_STORAGE_URL`.

use std::sync::Arc;

use fence_azure::credentials::DEFAULT_MSI_ENDPOINT;
use fence_azure::{AzureStore, AzureStoreBuilder};
use fence_core::Error;
use object_store::azure::AzureConfigKey;
use object_store::ClientConfigKey;

use crate::credentials::explained;
use crate::message::quoted;
use crate::open::{fence_decides, invalid, unknown_option, OpenOptions, Opened};
use crate::scheme::Scheme;

use super::{host_of, truthy};

/// Where Azurite listens unless told otherwise (object_store's default too).
const AZURITE: &str = "http://127.0.0.1:10000";

/// Opens `url` with the `AZURE_*` environment (unless left out) and `options` over it.
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    let builder = match options.reads_environment() {
        true => AzureStore::from_env(),
        false => AzureStore::builder(),
    }
    .with_url(url);
    let mut builder = configure(builder, options)?;
    check_credentials(&builder)?;
    if let Some(ttl) = options.ttl() {
        builder = builder.with_lease_ttl(ttl);
    }
    let store = builder.build().map_err(explained)?;
    Ok(Opened::remote(Scheme::Azure, url, Arc::new(store)))
}

/// `builder` with every option set; the emulator's two options taken together.
fn configure(
    mut builder: AzureStoreBuilder,
    options: &OpenOptions,
) -> Result<AzureStoreBuilder, Error> {
    let mut emulator_url = None;
    let mut use_emulator = None;
    for (key, value) in options.pairs() {
        match key {
            "azurite_blob_storage_url" => emulator_url = Some(value.to_owned()),
            "use_emulator" | "azure_storage_use_emulator" => use_emulator = Some(truthy(value)),
            _ => builder = builder.with_config(config_key(key)?, value),
        }
    }
    match (use_emulator, emulator_url) {
        (Some(false), _) => Ok(builder.with_config(AzureConfigKey::UseEmulator, "false")),
        (Some(true), None) => {
            let url = options.var("AZURITE_BLOB_STORAGE_URL");
            Ok(builder.with_emulator(url.unwrap_or_else(|| AZURITE.to_owned())))
        }
        (_, Some(url)) => Ok(builder.with_emulator(url)),
        (None, None) => Ok(builder),
    }
}

/// object_store's key named `key`, unless fence sets it itself.
fn config_key(key: &str) -> Result<AzureConfigKey, Error> {
    let parsed: AzureConfigKey = key.parse().map_err(|_| {
        unknown_option(
            Scheme::Azure,
            key,
            "object_store's AzureConfigKey names (account_name, account_key, sas_token, \
             bearer_token, client_id, client_secret, tenant_id, endpoint, msi_endpoint, \
             allow_http, …), use_emulator and azurite_blob_storage_url",
        )
    })?;
    let why = match parsed {
        AzureConfigKey::ContainerName => "the URL names the container",
        AzureConfigKey::Client(ClientConfigKey::Timeout | ClientConfigKey::ConnectTimeout) => {
            "its timeouts derive from the lease TTL"
        }
        _ => return Ok(parsed),
    };
    Err(fence_decides(Scheme::Azure, key, why))
}

/// With an account but no credential, the managed identity endpoint is asked at the first
/// request. That serves only Azure: for a custom blob endpoint, unless that identity
/// endpoint was configured too, it is refused up front, naming what to set.
fn check_credentials(builder: &AzureStoreBuilder) -> Result<(), Error> {
    let unconfigured = builder.managed_identity_endpoint().as_deref() == Some(DEFAULT_MSI_ENDPOINT);
    let Some(endpoint) = builder.endpoint().filter(|e| !is_azure(e)) else {
        return Ok(());
    };
    if !unconfigured {
        return Ok(());
    }
    Err(invalid(format!(
        "no Azure credentials for the endpoint {}: none configured (AZURE_STORAGE_ACCOUNT_KEY, \
         AZURE_STORAGE_SAS_KEY, AZURE_STORAGE_TOKEN, AZURE_CLIENT_ID with AZURE_CLIENT_SECRET \
         and AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE, AZURE_USE_AZURE_CLI), and Azure's \
         managed identity endpoint is not asked for another endpoint: set \
         AZURE_STORAGE_ACCOUNT_KEY (option account_key), or AZURE_MSI_ENDPOINT to ask an \
         identity endpoint of your own",
        quoted(&endpoint)
    )))
}

/// Whether `endpoint`'s host is one of Azure's storage hosts.
fn is_azure(endpoint: &str) -> bool {
    let host = host_of(endpoint);
    [
        ".core.windows.net",
        ".core.chinacloudapi.cn",
        ".core.usgovcloudapi.net",
        ".fabric.microsoft.com",
    ]
    .iter()
    .any(|suffix| host.ends_with(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_hosts_are_told_from_others() {
        assert!(is_azure("https://acct.blob.core.windows.net"));
        assert!(is_azure("https://acct.dfs.core.chinacloudapi.cn/"));
        assert!(!is_azure("http://127.0.0.1:10000/devstoreaccount1"));
        assert!(!is_azure("https://core.windows.net.evil.example"));
    }

    #[test]
    fn fences_own_keys_are_refused() {
        assert!(config_key("account_name").is_ok());
        for own in ["container_name", "azure_container_name", "timeout"] {
            assert!(config_key(own).is_err(), "{own}");
        }
    }
}
