//! Shared by the integration tests.

use std::fs::File;
use std::path::Path;

use fence_core::Key;

/// Takes `k`'s file lock below `root` as another writer would (a separate open file
/// description, so it excludes this process's writers too). Held until dropped.
pub fn hold_lock(root: &Path, k: &Key) -> File {
    let path = root.join(fence_fs::layout::object_path(k).unwrap().lock_file());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let holder = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    holder.lock().unwrap();
    holder
}
