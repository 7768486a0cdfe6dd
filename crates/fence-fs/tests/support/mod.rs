//! Shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use fence_core::Key;

/// Every file and directory below `dir` (not `dir` itself), without following symlinks.
pub fn files_below(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let is_dir = entry.file_type().unwrap().is_dir();
        out.push(path.clone());
        if is_dir {
            files_below(&path, out);
        }
    }
}

/// The version files of `k` below `root`, oldest first.
pub fn version_files(root: &Path, k: &Key) -> Vec<PathBuf> {
    let object = root.join(fence_fs::layout::object_path(k).unwrap().object_dir());
    let mut files = Vec::new();
    for inc in std::fs::read_dir(&object).unwrap() {
        for file in std::fs::read_dir(inc.unwrap().path()).unwrap() {
            files.push(file.unwrap().path());
        }
    }
    let generation =
        |p: &PathBuf| -> u64 { p.file_name().unwrap().to_str().unwrap().parse().unwrap() };
    files.sort_by_key(generation);
    files
}

/// The incarnation directory of `k` below `root`.
pub fn incarnation(root: &Path, k: &Key) -> PathBuf {
    let object = root.join(fence_fs::layout::object_path(k).unwrap().object_dir());
    std::fs::read_dir(&object)
        .unwrap()
        .next()
        .expect("an incarnation")
        .unwrap()
        .path()
}
