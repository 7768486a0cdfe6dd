//! [`Scheme`]: which backend a store URL names, and the cargo feature that builds it in.

use fence_core::{Error, ErrorKind};

use crate::message::quoted;

/// The backend a store URL names, by its scheme.
///
/// ```
/// use fence::Scheme;
/// assert_eq!(Scheme::of("s3://bucket/prefix").unwrap(), Scheme::S3);
/// assert_eq!(Scheme::of("azure://container").unwrap(), Scheme::Azure);
/// assert_eq!(Scheme::of("dynamodb://table/prefix").unwrap(), Scheme::DynamoDb);
/// assert_eq!(Scheme::S3.feature(), Some("s3"));
/// assert_eq!(Scheme::Memory.feature(), None);
/// assert!(Scheme::of("ftp://host/x").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `file:///abs/dir`: local files ([fence-fs](https://example.invalid/fence/crates/fence-fs)).
    File,
    /// `memory://`: one process's memory.
    Memory,
    /// `s3://bucket/prefix`.
    S3,
    /// `gs://bucket/prefix`.
    Gcs,
    /// `az://container/prefix` or `azure://container/prefix`.
    Azure,
    /// `opendal+<service>://<bucket or container>/prefix`.
    Opendal,
    /// `dynamodb://table/prefix`.
    DynamoDb,
}

/// What is known of a backend: its URL prefixes, an example URL, the cargo feature that
/// builds it in, and whether this build has it.
struct Backend {
    prefixes: &'static [&'static str],
    example: &'static str,
    feature: Option<&'static str>,
    built_in: bool,
}

/// Every backend, in the order an error lists them.
const ALL: [Scheme; 7] = [
    Scheme::File,
    Scheme::Memory,
    Scheme::S3,
    Scheme::Gcs,
    Scheme::Azure,
    Scheme::DynamoDb,
    Scheme::Opendal,
];

impl Scheme {
    /// The backend `url` names; [`ErrorKind::InvalidInput`] (not committed) for any other
    /// URL, listing the forms there are. Whether the backend is built in is not checked here
    /// ([`is_built_in`](Self::is_built_in)).
    pub fn of(url: &str) -> Result<Scheme, Error> {
        ALL.into_iter()
            .find(|s| s.backend().prefixes.iter().any(|p| url.starts_with(p)))
            .ok_or_else(|| {
                let forms: Vec<&str> = ALL.iter().map(|s| s.backend().example).collect();
                let message = format!(
                    "unsupported store URL {}: use {}",
                    quoted(url),
                    forms.join(", ")
                );
                Error::new(ErrorKind::InvalidInput, message).not_committed()
            })
    }

    /// The cargo feature of this crate that builds the backend in (`None`: always there).
    pub fn feature(self) -> Option<&'static str> {
        self.backend().feature
    }

    /// Whether this build of the crate can open the backend's URLs.
    pub fn is_built_in(self) -> bool {
        self.backend().built_in
    }

    /// How URLs of the backend start (`s3://`, `opendal+`, …): the first of its forms.
    pub fn prefix(self) -> &'static str {
        self.backend().prefixes[0]
    }

    /// The backend's row. A new backend is a variant, its row here, and its place in [`ALL`].
    fn backend(self) -> Backend {
        let row = |prefixes, example, feature, built_in| Backend {
            prefixes,
            example,
            feature,
            built_in,
        };
        match self {
            Scheme::File => row(
                &["file://"],
                "file:///abs/path",
                Some("fs"),
                cfg!(feature = "fs"),
            ),
            Scheme::Memory => row(&["memory://"], "memory://", None, true),
            Scheme::S3 => row(
                &["s3://"],
                "s3://bucket/prefix",
                Some("s3"),
                cfg!(feature = "s3"),
            ),
            Scheme::Gcs => row(
                &["gs://"],
                "gs://bucket/prefix",
                Some("gcs"),
                cfg!(feature = "gcs"),
            ),
            Scheme::Azure => row(
                &["az://", "azure://"],
                "az://container/prefix",
                Some("azure"),
                cfg!(feature = "azure"),
            ),
            Scheme::Opendal => row(
                &["opendal+"],
                "opendal+s3://bucket/prefix",
                Some("opendal"),
                cfg!(feature = "opendal"),
            ),
            Scheme::DynamoDb => row(
                &["dynamodb://"],
                "dynamodb://table/prefix",
                Some("dynamodb"),
                cfg!(feature = "dynamodb"),
            ),
        }
    }

    /// The error for a URL of this backend in a build without it: [`ErrorKind::Unsupported`],
    /// not committed, naming the feature to turn on.
    pub(crate) fn not_built_in(self) -> Error {
        let feature = self.feature().unwrap_or_default();
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "{} stores are not built in: turn on the `{feature}` feature (of the fence \
                 crate, or of fence-cli for the fence command)",
                self.prefix()
            ),
        )
        .not_committed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_is_named_by_its_example_and_its_prefixes() {
        for scheme in ALL {
            let backend = scheme.backend();
            assert_eq!(Scheme::of(backend.example).unwrap(), scheme);
            for prefix in backend.prefixes {
                assert_eq!(Scheme::of(&format!("{prefix}x/y")).unwrap(), scheme);
            }
        }
    }

    #[test]
    fn a_backend_not_built_in_is_unsupported_naming_its_feature() {
        let e = Scheme::Gcs.not_built_in();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.to_string().contains("`gcs` feature"), "{e}");
    }
}
