//! `file:///abs/dir`: an existing directory as a [`FsStore`], named by its absolute path so
//! that one URL is one lock domain whatever the working directory.

use std::path::Path;
use std::sync::Arc;

use fence_core::Error;
use fence_fs::FsStore;

use crate::message::quoted;
use crate::open::{invalid, OpenOptions, Opened};
use crate::scheme::Scheme;

/// Opens `url` (`file://` and an absolute path to an existing directory). It takes no
/// options but [`OpenOptions::file_mode`] and [`OpenOptions::read_only`].
pub(super) fn open(url: &str, options: &OpenOptions) -> Result<Opened, Error> {
    options.refuse_options(Scheme::File)?;
    let path = Path::new(&url["file://".len()..]);
    let root = existing_dir(path)?;
    let (file_mode, read_only) = options.file_access();
    let mut fs = FsStore::options().read_only(read_only);
    if let Some(mode) = file_mode {
        fs = fs
            .file_mode(check_file_mode(mode)?)
            .dir_mode(dir_mode_for(mode));
    }
    let store = fs.open(&root)?;
    Ok(Opened {
        store: Arc::new(store),
        url: format!("file://{}", root.display()),
        scheme: Scheme::File,
        root: Some(root),
        file_mode,
    })
}

/// `path` resolved, if it is absolute and an existing directory.
fn existing_dir(path: &Path) -> Result<std::path::PathBuf, Error> {
    let shown = || quoted(&path.display().to_string());
    if path.as_os_str().is_empty() {
        return Err(invalid("file:// URL without a path (use file:///abs/path)"));
    }
    if !path.is_absolute() {
        return Err(invalid(format!(
            "file:// URL with a relative path {}: use file:///abs/path (three slashes), so the \
             URL names the same directory from every working directory",
            shown()
        )));
    }
    if !path.is_dir() {
        return Err(invalid(format!(
            "store directory {} does not exist or is not a directory (create it first: mkdir -p)",
            shown()
        )));
    }
    std::fs::canonicalize(path)
        .map_err(|e| invalid(format!("cannot resolve store directory {}", shown())).with_source(e))
}

/// `mode`, if it gives the owner read and write and nobody execute.
fn check_file_mode(mode: u32) -> Result<u32, Error> {
    if mode <= 0o777 && mode & 0o600 == 0o600 && mode & 0o111 == 0 {
        return Ok(mode);
    }
    Err(invalid(format!(
        "file mode {mode:o}: expected read and write for the owner and no execute bits, like \
         0640 or 0660"
    )))
}

/// The directory mode that goes with file mode `file`: execute where read is allowed
/// (0600 → 0700, 0640 → 0750, 0660 → 0770).
fn dir_mode_for(file: u32) -> u32 {
    file | ((file & 0o444) >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_get_execute_where_files_get_read() {
        assert_eq!(dir_mode_for(0o600), 0o700);
        assert_eq!(dir_mode_for(0o640), 0o750);
        assert_eq!(dir_mode_for(0o660), 0o770);
        assert_eq!(dir_mode_for(0o644), 0o755);
    }

    #[test]
    fn file_modes_need_owner_read_write_and_no_execute() {
        for good in [0o600, 0o640, 0o660, 0o666] {
            assert_eq!(check_file_mode(good).unwrap(), good);
        }
        for bad in [0o400, 0o200, 0o700, 0o610, 0o1600, 0o7777] {
            assert!(check_file_mode(bad).is_err(), "{bad:o}");
        }
    }
}
