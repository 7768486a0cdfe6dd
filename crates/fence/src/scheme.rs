//! [`Scheme`]: which backend a store URL names, and the cargo feature that builds it in.

use fence_core::{Error, ErrorKind};

use crate::message::quoted;

/// The backend a store URL names, by its scheme.
///
/// ```
/// use fence::Scheme;
/// assert_eq!(Scheme::of("s3://bucket/prefix").unwrap(), Scheme::S3);
/// assert_eq!(Scheme::of("azure://container").unwrap(), Scheme::Azure);
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
}

/// Every URL form, in the order an error lists them.
const FORMS: [(&str, Scheme); 7] = [
    ("file://", Scheme::File),
    ("memory://", Scheme::Memory),
    ("s3://", Scheme::S3),
    ("gs://", Scheme::Gcs),
    ("az://", Scheme::Azure),
    ("azure://", Scheme::Azure),
    ("opendal+", Scheme::Opendal),
];

impl Scheme {
    /// The backend `url` names; [`ErrorKind::InvalidInput`] (not committed) for any other
    /// URL, listing the forms there are. Whether the backend is built in is not checked here
    /// ([`is_built_in`](Self::is_built_in)).
    pub fn of(url: &str) -> Result<Scheme, Error> {
        FORMS
            .iter()
            .find(|(prefix, _)| url.starts_with(prefix))
            .map(|(_, scheme)| *scheme)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "unsupported store URL {}: use file:///abs/path, memory://, \
                         s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or \
                         opendal+s3://bucket/prefix",
                        quoted(url)
                    ),
                )
                .not_committed()
            })
    }

    /// The cargo feature of this crate that builds the backend in (`None`: always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Scheme::File => Some("fs"),
            Scheme::Memory => None,
            Scheme::S3 => Some("s3"),
            Scheme::Gcs => Some("gcs"),
            Scheme::Azure => Some("azure"),
            Scheme::Opendal => Some("opendal"),
        }
    }

    /// Whether this build of the crate can open the backend's URLs.
    pub fn is_built_in(self) -> bool {
        match self {
            Scheme::File => cfg!(feature = "fs"),
            Scheme::Memory => true,
            Scheme::S3 => cfg!(feature = "s3"),
            Scheme::Gcs => cfg!(feature = "gcs"),
            Scheme::Azure => cfg!(feature = "azure"),
            Scheme::Opendal => cfg!(feature = "opendal"),
        }
    }

    /// How URLs of the backend start (`s3://`, `opendal+`, …): the first of its forms.
    pub fn prefix(self) -> &'static str {
        FORMS
            .iter()
            .find(|(_, scheme)| *scheme == self)
            .map_or("", |(prefix, _)| prefix)
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
